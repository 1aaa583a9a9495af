defmodule ExBurn.Defn.FuseTest do
  # Fusion of elementwise chains in ExBurn.Defn.Compiler (ExBurn.Defn.Fuse): the grouping
  # rules on hand-made blocks, and compiled functions run fused and unfused, which must give
  # the same bits, with fewer launches fused.
  use ExUnit.Case, async: false
  import Nx.Defn

  alias ExBurn.Defn.Fuse

  @compiler ExBurn.Defn.Compiler

  defp op(name, inputs, type \\ "f32", shape \\ [2, 3]),
    do: {:op, "nx_" <> name, inputs, [type: type, shape: shape, compute: type], "Nx.#{name}"}

  describe "grouping" do
    test "a chain becomes one instruction that gives what the rest of the block reads" do
      block =
        {2,
         [
           op("multiply", [{:param, 0}, {:param, 1}]),
           op("add", [{:value, 0, 0}, {:const, 0}]),
           op("exp", [{:value, 1, 0}])
         ], [{:value, 2, 0}, {:value, 0, 0}]}

      [{2, [{:op, "nx_fused", inputs, opts, label}], outputs}] = Fuse.blocks([block])
      assert inputs == [{:param, 0}, {:param, 1}, {:const, 0}]
      assert opts[:ops] == [{"multiply", [0, 1]}, {"add", [3, 2]}, {"exp", [4]}]
      # the product is read by the block's outputs too
      assert opts[:outputs] == [3, 5]
      assert outputs == [{:value, 0, 1}, {:value, 0, 0}]
      assert label =~ "Nx.multiply, Nx.add, Nx.exp"
    end

    test "an f32 group takes scalar constants as literals of its kernel" do
      block = {1, [op("multiply", [{:param, 0}, {:const, 0}]), op("add", [{:value, 0, 0}, {:const, 1}]), op("subtract", [{:value, 1, 0}, {:const, 2}])], [{:value, 2, 0}]}
      <<half::32>> = <<0.5::float-32>>
      scalars = %{0 => {{:f, 32}, 0.5}, 1 => {{:s, 64}, 3}, 2 => {{:f, 32}, :nan}}
      [{1, [{:op, "nx_fused", inputs, opts, _}], _}] = Fuse.blocks([block], scalars)
      # NaN can't be a literal: it stays an input
      assert inputs == [{:param, 0}, {:const, 2}]
      assert opts[:ops] == [{"constant", [half]}, {"constant", [0x40400000]}, {"multiply", [0, 2]}, {"add", [4, 3]}, {"subtract", [5, 1]}]
      # f64 groups keep their constants as inputs
      f64 = {1, [op("multiply", [{:param, 0}, {:const, 0}], "f64"), op("exp", [{:value, 0, 0}], "f64")], [{:value, 1, 0}]}
      [{1, [{:op, "nx_fused", [{:param, 0}, {:const, 0}], _, _}], _}] = Fuse.blocks([f64], scalars)
    end

    test "a group read by another instruction is closed: later ops start a new group after it" do
      dot = {:op, "nx_dot", [{:value, 0, 0}, {:param, 1}], [type: "f32", shape: [2, 2]], "Nx.dot"}

      instrs = [
        op("exp", [{:param, 0}]),
        dot,
        op("add", [{:value, 0, 0}, {:const, 0}]),
        op("multiply", [{:value, 2, 0}, {:value, 2, 0}])
      ]

      [{2, new, [out]}] = Fuse.blocks([{2, instrs, [{:value, 3, 0}]}])

      assert [
               {:op, "nx_exp", [{:param, 0}], _, _},
               {:op, "nx_dot", [{:value, 0, 0}, {:param, 1}], _, _},
               {:op, "nx_fused", [{:value, 0, 0}, {:const, 0}], opts, _}
             ] = new

      assert opts[:ops] == [{"add", [0, 1]}, {"multiply", [2, 2]}]
      assert out == {:value, 2, 0}
    end

    test "ops of other types or shapes, comparisons and complex ops stay apart" do
      instrs = [
        op("exp", [{:param, 0}]),
        op("add", [{:value, 0, 0}, {:param, 0}], "f32", [3]),
        op("multiply", [{:value, 0, 0}, {:value, 0, 0}], "f64"),
        op("greater", [{:value, 0, 0}, {:param, 0}]),
        {:op, "nx_add", [{:value, 0, 0}, {:param, 0}],
         [type: "f32", shape: [2, 3], compute: "f32", complex: [false, true]], "Nx.add"}
      ]

      outputs = for i <- 1..4, do: {:value, i, 0}
      assert Fuse.blocks([{1, instrs, outputs}]) == [{1, instrs, outputs}]
    end

    test "a comparison that only selects read joins them; one read elsewhere stays apart" do
      cmp = {:op, "nx_greater", [{:param, 0}, {:const, 0}], [type: "u8", shape: [2, 3], compute: "f32"], "Nx.greater"}
      sel = {:op, "nx_select", [{:value, 0, 0}, {:param, 0}, {:const, 1}], [type: "f32", shape: [2, 3]], "Nx.select"}
      [{1, [{:op, "nx_fused", inputs, opts, _}], [out]}] = Fuse.blocks([{1, [cmp, sel], [{:value, 1, 0}]}])
      assert inputs == [{:param, 0}, {:const, 0}, {:const, 1}]
      assert opts[:ops] == [{"greater", [0, 1]}, {"select", [3, 0, 2]}]
      assert out == {:value, 0, 0}
      # the comparison is an output of the program too: it keeps its u8 instruction
      block = {1, [cmp, sel], [{:value, 1, 0}, {:value, 0, 0}]}
      assert Fuse.blocks([block]) == [block]
    end

    test "a group whose last member is a comparison (its select not fusable) takes the group's type" do
      cmp = {:op, "nx_greater", [{:value, 0, 0}, {:const, 0}], [type: "u8", shape: [2, 3], compute: "f32"], "Nx.greater"}
      sel = {:op, "nx_select", [{:value, 1, 0}, {:param, 0}, {:const, 1}], [type: "f32", shape: [2, 3], narrow: ["bf16"]], "Nx.select"}
      [{1, [{:op, "nx_fused", _, opts, _}, _sel], _}] = Fuse.blocks([{1, [op("exp", [{:param, 0}]), cmp, sel], [{:value, 2, 0}]}])
      assert opts[:type] == "f32"
    end

    test "an integer group read only by a concatenate of its outputs writes them stacked" do
      a = op("bitwise_xor", [{:param, 0}, {:param, 1}], "u32", [4])
      b = op("add", [{:value, 0, 0}, {:param, 1}], "u32", [4])
      c = op("left_shift", [{:value, 1, 0}, {:param, 0}], "u32", [4])
      cat = {:op, "nx_concatenate", [{:value, 0, 0}, {:value, 2, 0}], [type: "u32", shape: [8], axis: 0], "Nx.concatenate"}
      other = {:op, "nx_concatenate", [{:param, 0}, {:value, 3, 0}], [type: "u32", shape: [12], axis: 0], "Nx.concatenate"}
      [{2, instrs, [out]}] = Fuse.blocks([{2, [a, b, c, cat, other], [{:value, 4, 0}]}])

      assert [
               {:op, "nx_fused", [{:param, 0}, {:param, 1}], opts, _},
               {:op, "nx_reshape", [{:value, 0, 0}], [type: "u32", shape: [8]], _},
               {:op, "nx_concatenate", [{:param, 0}, {:value, 1, 0}], _, _}
             ] = instrs

      assert opts[:stacked] == true and opts[:shape] == [8] and length(opts[:outputs]) == 2
      assert out == {:value, 2, 0}
    end

    test "nested blocks fuse on their own, and instructions after a group read its outputs" do
      body = {1, [op("sin", [{:param, 0}]), op("cos", [{:value, 0, 0}])], [{:value, 1, 0}]}

      main =
        {1, [op("abs", [{:param, 0}]), op("sqrt", [{:value, 0, 0}]), {:while, [{:value, 1, 0}], 2, 1}],
         [{:value, 2, 0}]}

      [{1, [fused, {:while, [{:value, 0, 0}], 2, 1}], [{:value, 1, 0}]}, {1, [body_fused], [{:value, 0, 0}]}] =
        Fuse.blocks([main, body])

      assert {:op, "nx_fused", [{:param, 0}], _, _} = fused
      assert {:op, "nx_fused", [{:param, 0}], _, _} = body_fused
    end
  end

  describe "common subexpressions" do
    test "an entry run again on the same inputs with the same options runs once" do
      sum = {:op, "nx_sum", [{:param, 0}], [type: "f32", shape: [3], axes: [0], keep_axes: false], "Nx.sum"}
      other = {:op, "nx_sum", [{:param, 0}], [type: "f32", shape: [2], axes: [1], keep_axes: false], "Nx.sum"}
      instrs = [sum, other, sum, op("add", [{:value, 0, 0}, {:value, 2, 0}], "f32", [3]), {:hook, 0, [{:value, 2, 0}]}]
      [{1, new, outputs}] = ExBurn.Defn.Cse.blocks([{1, instrs, [{:value, 3, 0}, {:value, 2, 0}, {:value, 1, 0}]}])
      assert new == [sum, other, op("add", [{:value, 0, 0}, {:value, 0, 0}], "f32", [3]), {:hook, 0, [{:value, 0, 0}]}]
      assert outputs == [{:value, 2, 0}, {:value, 0, 0}, {:value, 1, 0}]
    end
  end

  describe "compiled functions" do
    defn chain(x, b) do
      y = Nx.tanh(x * b + 1.0)
      z = Nx.exp(-y) / Nx.sqrt(Nx.abs(x) + 1)
      {y, Nx.max(z, Nx.min(y, 0.5)), Nx.rsqrt(Nx.abs(x) + 2) |> Nx.pow(2) |> Nx.atan2(x)}
    end

    # Patterns a shader compiler might simplify as real arithmetic.
    defn(cancel(x), do: {x - x, x + -x, x / x, Nx.log(Nx.exp(x)), x * 0.0})

    defn closed(x, w) do
      a = Nx.exp(x)
      d = Nx.dot(a, w)
      (a + 1) * Nx.sum(d)
    end

    defn relu_grad(x, g), do: Nx.select(x > 0, g, 0.0) * Nx.select(Nx.less_equal(x, 1), 2.0, g)

    defn loop(x) do
      {_i, acc} = while({i = 0, acc = x}, i < 3, do: {i + 1, Nx.cos(Nx.sin(acc) * 2) + 1})
      acc
    end

    # Integer chains as counter-based generators write them: wrapping adds, rotations, xors,
    # shifts by the width or more, negatives, a comparison read by a select, scalars.
    defn int_chain(x, y, s) do
      rot = x <<< 13 ||| x >>> 19
      mixed = Nx.bitwise_xor(rot + y, y * 3 - x)
      wide = (mixed <<< s) + (mixed >>> s) + Nx.bitwise_not(mixed)
      {wide, Nx.select(mixed > y, -mixed, Nx.max(mixed, x) - Nx.min(y, 7))}
    end

    defp run(fun, args, fuse) do
      @compiler.clear_cache()
      jitted = Nx.Defn.jit(fun, compiler: @compiler, fuse: fuse)
      apply(jitted, args)
      before = ExCubecl.launch_count()
      result = apply(jitted, args)
      {result, ExCubecl.launch_count() - before}
    end

    defp bits(result),
      do: [result] |> Nx.Defn.Composite.flatten_list() |> Enum.map(&{&1.type, &1.shape, Nx.to_binary(&1)})

    defp types do
      supported = ExCubecl.supported_dtypes()

      Enum.filter(
        [{:f, 32}, {:f, 16}, {:f, 64}],
        &(Nx.Type.to_string(&1) |> String.to_atom() |> then(fn t -> t in supported end))
      )
    end

    test "give the bits the unfused program gives, in fewer launches, for each float type" do
      for type <- types() do
        x = Nx.tensor([[-1.5, 0.25, 2.0], [0.0, -0.0, 3.5]], type: type, backend: ExBurn.Backend)
        b = Nx.tensor([0.5, -2.0, 1.0], type: type, backend: ExBurn.Backend)
        {fused, fused_launches} = run(&chain/2, [x, b], true)
        {unfused, unfused_launches} = run(&chain/2, [x, b], false)
        assert bits(fused) == bits(unfused), "#{inspect(type)}"

        assert fused_launches < unfused_launches,
               "#{inspect(type)}: #{fused_launches} launches fused, #{unfused_launches} unfused"
      end
    end

    # (eight programs compiled: minutes on a loaded machine)
    @tag timeout: 600_000
    test "integer chains fuse into one launch with the unfused bits (s32, u32, s64, u64)" do
      for type <- [{:s, 32}, {:u, 32}, {:s, 64}, {:u, 64}], Nx.Type.to_string(type) |> String.to_atom() |> then(&(&1 in ExCubecl.supported_dtypes())) do
        x = Nx.tensor([[-7, 0, 1], [2_000_000_001, -1, 12345]], type: :s64) |> Nx.as_type(type) |> Nx.backend_transfer(ExBurn.Backend)
        y = Nx.tensor([3, -2_000_000_000, 77], type: :s64) |> Nx.as_type(type) |> Nx.backend_transfer(ExBurn.Backend)
        s = Nx.tensor([[0, 5, 31], [32, 40, 63]], type: type, backend: ExBurn.Backend)
        {fused, fused_launches} = run(&int_chain/3, [x, y, s], true)
        {unfused, unfused_launches} = run(&int_chain/3, [x, y, s], false)
        assert bits(fused) == bits(unfused), inspect(type)
        assert fused_launches < unfused_launches, "#{inspect(type)}: #{fused_launches} fused, #{unfused_launches} unfused"
        want = Nx.Defn.jit(&int_chain/3, compiler: Nx.Defn.Evaluator).(Nx.backend_copy(x, Nx.BinaryBackend), Nx.backend_copy(y, Nx.BinaryBackend), Nx.backend_copy(s, Nx.BinaryBackend))
        assert bits(fused) == bits(want), inspect(type)
      end
    end

    test "comparisons and selects fuse, with the unfused bits" do
      x = Nx.tensor([[-1.0, 0.0, 0.5], [1.0, :nan, 3.0]], backend: ExBurn.Backend)
      g = Nx.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], backend: ExBurn.Backend)
      {fused, fused_launches} = run(&relu_grad/2, [x, g], true)
      {unfused, unfused_launches} = run(&relu_grad/2, [x, g], false)
      assert bits(fused) == bits(unfused)
      assert fused_launches < unfused_launches
    end

    test "keep IEEE results where algebra would cancel: infinities and NaN" do
      x = Nx.tensor([1.0, :infinity, :neg_infinity, :nan, 0.0, -0.0], backend: ExBurn.Backend)
      {fused, _} = run(&cancel/1, [x], true)
      {unfused, _} = run(&cancel/1, [x], false)
      assert bits(fused) == bits(unfused)
      assert Nx.to_list(elem(fused, 0)) == [0.0, :nan, :nan, :nan, 0.0, 0.0]
    end

    test "a group read by a dot, and loop bodies, compute what the evaluator computes" do
      x = Nx.iota({2, 3}, type: :f32, backend: ExBurn.Backend) |> Nx.divide(6)
      w = Nx.iota({3, 2}, type: :f32, backend: ExBurn.Backend) |> Nx.subtract(2)
      {fused, _} = run(&closed/2, [x, w], true)
      {unfused, _} = run(&closed/2, [x, w], false)
      assert bits(fused) == bits(unfused)
      {fused, fused_launches} = run(&loop/1, [x], true)
      {unfused, unfused_launches} = run(&loop/1, [x], false)
      assert bits(fused) == bits(unfused)
      assert fused_launches < unfused_launches
      want = Nx.Defn.jit(&loop/1, compiler: Nx.Defn.Evaluator).(Nx.backend_copy(x, Nx.BinaryBackend))
      assert Nx.all_close(Nx.backend_copy(fused, Nx.BinaryBackend), want, atol: 1.0e-6) |> Nx.to_number() == 1
    end
  end
end
