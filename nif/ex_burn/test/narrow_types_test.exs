defmodule ExBurn.NarrowTypesTest do
  # The Nx types that the device stores narrow and computes wider (the NIF's
  # `ops/nx/narrow.rs`): the 8-bit floats and the sub-byte integers. Conversions bit for bit
  # with Nx.BinaryBackend; ops against BinaryBackend, eagerly and compiled by
  # ExBurn.Defn.Compiler. And bf16, which ExCubecl's backend holds itself on every device (as
  # u16 bits computed in f32 where the device lacks it), rounding to nearest even.
  use ExUnit.Case, async: false

  @floats8 [{:f, 8}, {:f8_e4m3fn, 8}]
  @ints [{:s, 2}, {:s, 4}, {:u, 2}, {:u, 4}]

  defp binary(t), do: Nx.backend_copy(t, Nx.BinaryBackend)
  defp on_device(t), do: Nx.backend_copy(t, ExBurn.Backend)

  defp f32(values), do: Nx.tensor(values, type: :f32, backend: Nx.BinaryBackend)

  test "every 8-bit float reads as Nx reads it (E5M2's subnormals as the standard defines them)" do
    for type <- @floats8 do
      bits = Nx.from_binary(Enum.into(0..255, <<>>, &<<&1>>), type, backend: Nx.BinaryBackend)
      want = bits |> Nx.as_type(:f32) |> Nx.to_flat_list() |> Enum.with_index(&subnormal(type, &1, &2))
      assert bits |> on_device() |> Nx.as_type(:f32) |> Nx.to_flat_list() == want, inspect(type)
      # and a tensor made on the device holds the same bits
      assert bits |> on_device() |> Nx.to_binary() == Nx.to_binary(bits)
    end
  end

  # Nx 0.13's E5M2 reader takes the subnormals (exponent 0, mantissa m > 0) for 2^-15 (1 + m/4);
  # OFP8, f16 (whose upper byte E5M2 is) and Nx's own writer make them 2^-14 m/4, as ExBurn does.
  defp subnormal({:f, 8}, _nx, byte) when byte in [1, 2, 3, 129, 130, 131] do
    m = Bitwise.band(byte, 3) * :math.pow(2, -16)
    if byte > 128, do: -m, else: m
  end

  defp subnormal(_type, nx, _byte), do: nx

  # Values of every magnitude the types hold, the midpoints between neighbours of each type
  # (k / 16 covers those of 2 and 3 mantissa bits), subnormals, and seeded random values.
  defp samples(max) do
    :rand.seed(:exsss, 20_261_125)
    grid = for e <- -18..15, k <- 0..15, v = (1 + k / 16) * :math.pow(2, e), v <= max, do: v
    random = for _ <- 1..300, do: (:rand.uniform() - 0.5) * :math.pow(2, :rand.uniform(24) - 14)
    grid ++ Enum.map(grid, &(-&1)) ++ Enum.filter(random, &(abs(&1) <= max)) ++ [0.0, max, -max]
  end

  test "f32 to f8 and f8_e4m3fn rounds as Nx writes each type, specials included" do
    # f8 through f16 (whose largest finite value bounds Nx's conversion), f8_e4m3fn saturating
    cases = [{{:f, 8}, samples(57_344.0)}, {{:f8_e4m3fn, 8}, samples(600.0) ++ [:infinity, :neg_infinity]}]

    for {type, values} <- cases do
      x = f32(values ++ [:nan])
      want = Nx.as_type(x, type)
      got = x |> on_device() |> Nx.as_type(type)
      mismatches = for {w, g, v} <- Enum.zip([bytes(want), bytes(got), values ++ [:nan]]), w != g, do: {v, w, g}
      assert mismatches == [], "#{inspect(type)}: {value, Nx's bits, ours}: #{inspect(Enum.take(mismatches, 10))}"
    end
  end

  test "f32 to bf16 rounds to nearest even (BinaryBackend truncates), specials included" do
    values = samples(1.0e30) ++ [3.4028234663852886e38, -3.4028234663852886e38, :infinity, :neg_infinity, :nan]
    x = f32(values)
    got = x |> on_device() |> Nx.as_type(:bf16)
    mismatches = for {w, g, v} <- Enum.zip([bytes(bf16_rne(x)), bytes(got), values]), w != g, do: {v, w, g}
    assert mismatches == [], "{value, bits rounded to nearest even, ours}: #{inspect(Enum.take(mismatches, 10))}"
  end

  # An f32 tensor rounded to bf16, ties to even (the largest f32 values round to infinity); NaN
  # is the quiet NaN of its sign.
  defp bf16_rne(%Nx.Tensor{type: {:f, 32}, shape: shape} = t) do
    import Bitwise

    bits =
      for <<b::unsigned-32-native <- Nx.to_binary(t)>>, into: <<>> do
        r = if (b &&& 0x7FFFFFFF) > 0x7F800000, do: (b >>> 16 &&& 0x8000) ||| 0x7FC0, else: (b + 0x7FFF + (b >>> 16 &&& 1)) >>> 16
        <<r::unsigned-16-native>>
      end

    bits |> Nx.from_binary(:bf16, backend: Nx.BinaryBackend) |> Nx.reshape(shape)
  end

  defp bytes(%Nx.Tensor{type: {_, bits}} = t) do
    for <<b::size(bits)-bitstring <- t |> binary() |> Nx.to_binary()>>, do: b
  end

  # The ops each type runs, compared with BinaryBackend: `{name, fun, inputs}`. (Not the
  # cumulative ops: Nx's default implementation, which BinaryBackend runs, rounds every partial
  # sum to the type; ExBurn keeps them in f32 and rounds the results.)
  defp float_cases(type) do
    a = f32([[0.5, -1.5, 2.0], [3.0, 0.25, -0.75]]) |> Nx.as_type(type)
    b = f32([[1.0, 2.0, -0.5], [0.125, -3.0, 1.5]]) |> Nx.as_type(type)

    [
      {"add", &Nx.add/2, [a, b]},
      {"multiply", &Nx.multiply/2, [a, b]},
      {"divide", &Nx.divide/2, [a, b]},
      {"subtract a scalar", &Nx.subtract(&1, 1.5), [a]},
      {"negate", &Nx.negate/1, [a]},
      {"exp", &Nx.exp/1, [a]},
      {"max", &Nx.max/2, [a, b]},
      {"sum", &Nx.sum(&1, axes: [1]), [a]},
      {"dot", &Nx.dot(&1, Nx.transpose(&2)), [a, b]},
      {"transpose, concatenate, slice", &(Nx.concatenate([Nx.transpose(&1), Nx.transpose(&2)]) |> Nx.slice([1, 0], [3, 2])), [a, b]},
      {"take", &Nx.take(&1, Nx.tensor([2, 0]), axis: 1), [a]},
      {"sort", &Nx.sort(&1, axis: 1), [a]},
      {"argmax", &Nx.argmax(&1, axis: 1), [a]},
      {"select and less", &Nx.select(Nx.less(&1, &2), &1, &2), [a, b]},
      {"as_type f32", &Nx.as_type(&1, :f32), [a]},
      {"mixed with f32", &Nx.add(&1, Nx.tensor(0.5, type: :f32)), [a]}
    ]
  end

  defp int_cases({sign, bits} = type) do
    {lo, hi} = if sign == :s, do: {-Integer.pow(2, bits - 1), Integer.pow(2, bits - 1) - 1}, else: {0, Integer.pow(2, bits) - 1}
    values = for i <- 0..5, do: lo + rem(i * 3, hi - lo + 1)
    a = Nx.tensor(values, type: type, backend: Nx.BinaryBackend)
    b = Nx.tensor(Enum.reverse(values), type: type, backend: Nx.BinaryBackend)

    [
      {"add (wraps)", &Nx.add/2, [a, b]},
      {"multiply (wraps)", &Nx.multiply/2, [a, b]},
      {"subtract", &Nx.subtract/2, [a, b]},
      {"negate", &Nx.negate/1, [a]},
      {"bitwise_xor", &Nx.bitwise_xor/2, [a, b]},
      {"left_shift", &Nx.left_shift(&1, 1), [a]},
      {"max", &Nx.max/2, [a, b]},
      {"sum", &Nx.sum/1, [a]},
      {"reverse", &Nx.reverse/1, [a]},
      {"as_type f32", &Nx.as_type(&1, :f32), [a]},
      {"from f32 (truncates and wraps)", &Nx.as_type(&1, type), [Nx.tensor([7.9, -9.5, 3.2, 17.0], backend: Nx.BinaryBackend)]}
    ]
  end

  defp check(type, {name, fun, inputs}, want \\ nil) do
    want = want || Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, inputs) end)
    device = Enum.map(inputs, &on_device/1)
    eager = Nx.with_default_backend(ExBurn.Backend, fn -> apply(fun, device) end)
    compiled = Nx.with_default_backend(ExBurn.Backend, fn -> apply(Nx.Defn.jit(fun, compiler: ExBurn.Defn.Compiler), device) end)

    for {how, got} <- [eager: eager, compiled: compiled] do
      label = "#{inspect(type)} #{name} (#{how})"
      assert got.type == want.type and got.shape == want.shape, "#{label}: #{inspect(got)} vs #{inspect(want)}"
      assert Nx.to_flat_list(binary(got)) == Nx.to_flat_list(want), "#{label}: #{inspect(got)}\nBinaryBackend #{inspect(want)}"
    end
  end

  test "8-bit floats compute in f32 and give BinaryBackend's results" do
    for type <- @floats8, c <- float_cases(type), do: check(type, c)
  end

  test "bf16 gives BinaryBackend's f32 results rounded to nearest even" do
    for {name, fun, inputs} <- float_cases({:bf, 16}) do
      typed = Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, inputs) end)
      wide = Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, Enum.map(inputs, &Nx.as_type(&1, :f32))) end)
      want = if typed.type == {:bf, 16}, do: bf16_rne(wide), else: Nx.as_type(wide, typed.type)
      check({:bf, 16}, {name, fun, inputs}, want)
    end
  end

  test "sub-byte integers compute in a byte and wrap to their width as BinaryBackend does" do
    for type <- @ints, c <- int_cases(type), do: check(type, c)
  end

  test "a sub-byte tensor round-trips its packed binary" do
    for type <- @ints do
      t = Nx.iota({5}, type: type, backend: Nx.BinaryBackend)
      d = on_device(t)
      assert Nx.to_binary(d) == Nx.to_binary(t)
      assert Nx.to_flat_list(d) == Nx.to_flat_list(t)
      assert Nx.to_flat_list(Nx.slice(d, [1], [3])) == Nx.to_flat_list(Nx.slice(t, [1], [3]))
    end
  end
end
