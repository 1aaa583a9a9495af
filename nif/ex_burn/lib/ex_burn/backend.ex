defmodule ExBurn.Backend do
  @moduledoc """
  An Nx backend whose tensors live on an ExCubecl device (CUDA, Vulkan, Metal, or Mesa's
  lavapipe): every callback is one call of the NIF, whose Rust side holds Nx's semantics next
  to the kernels (`nif/ex_cubecl/native/ex_cubecl_nif/src/ops/nx/`).

      Nx.default_backend(ExBurn.Backend)
      Nx.default_backend({ExBurn.Backend, device: "cuda:0"})

  ## Options

    * `:device` - a device string of `ExCubecl.devices/0` (`"cuda:0"`, `"wgpu"`,
      `"wgpu:cpu"`, ...) or `:gpu` / `:cpu` / `:cuda` / `:wgpu`. The default is `ExBurn.default_device_spec/0`.

  ## Where it differs from `Nx.BinaryBackend`

    * Every Nx type runs on every device. bf16 results round to nearest even on every
      device, as EXLA's and Torchx's do (BinaryBackend truncates the f32 value); where the
      device has no bf16 arithmetic (lavapipe, most Vulkan and Metal GPUs), ExCubecl's backend
      holds bf16 tensors as their bits in u16 and computes them in f32. The other types a
      device has no arithmetic for are stored at their width and computed wider, and each
      result converted back as `Nx.BinaryBackend` converts to the type: the 8-bit floats
      `f8` (E5M2) and `f8_e4m3fn` as their bits in u8, computed in f32 (E5M2 rounds through
      f16 and keeps its upper byte, E4M3FN saturates at ±448 as
      `Nx.Floating.dump_f8_e4m3fn` does); the sub-byte integers (`s2`, `s4`, `u2`, `u4`) one
      per byte, wrapping to their width after every op. Partial sums of the cumulative ops
      stay in f32 (BinaryBackend rounds each to the type), and E5M2's subnormals read as the
      standard and Nx's own writer define them (2^-14 m/4; Nx 0.13's reader says
      2^-15 (1 + m/4)). The one type a device can refuse is f64 (and c128), on a GPU without
      it: `ExBurn.Error` names the type and the device.
    * Complex tensors are pairs of floats per element on the device (f32 for `c64`, f64 for
      `c128`), and every callback Nx defines for them runs there, with the `Complex`
      library's formulas and branch cuts: arithmetic, `pow`, the elementary functions and
      their inverses, `sigmoid`, `rsqrt`, `cbrt`, sums and products (cumulative too), `dot`,
      `conv`, `triangular_solve` (`transform_a: :conjugate` conjugates without transposing,
      as BinaryBackend does) and the FFTs; the `Nx.LinAlg` blocks run Nx's default
      implementations on them. `erf`, `erfc` and `erf_inv` of complex tensors raise, as in
      BinaryBackend.
    * Integer division by zero gives 0 (BinaryBackend raises).
    * `triangular_solve` and `Nx.LinAlg.solve` of a singular matrix raise `ArgumentError`
      as in BinaryBackend, eagerly; in a jitted `defn` the first gives infinities and NaN and
      the second raises `ExBurn.Error` (a program does not stop to read its values).
    * Out-of-range indices in `gather`, `take`, `indexed_add` and `indexed_put` are clamped
      into range, as in EXLA (BinaryBackend raises): checking them would read every index
      tensor back from the device.
    * Shift amounts outside `0..bits - 1`, negative ones included, shift everything out: 0,
      or -1 for a right shift of a negative number (BinaryBackend raises for negative ones).
    * `sign(NaN)` is NaN and `sign(-inf)` is -1.0, as in EXLA (BinaryBackend gives 1.0 for
      both).
    * `from_pointer/5` and `to_pointer/2` raise: device memory is not shared with other
      processes.
    * `Nx.reduce/4` and `Nx.window_reduce/5` run as one kernel when the function is one of
      Nx's associative binary ops (`&Nx.add/2`, `&Nx.multiply/2`, `&Nx.max/2`, `&Nx.min/2`,
      the logical and bitwise ands and ors); any other function is folded element by
      element in `Nx.BinaryBackend`'s order, compiled by `ExBurn.Defn.Compiler` (one turn
      of a device loop per element: slow on large tensors).
    * `block/4` runs natively (one NIF call) for the cumulative ops, `take`,
      `take_along_axis`, `top_k`, `fft2` / `ifft2` / `rfft` / `irfft`, and the
      `Nx.Block.LinAlg` blocks Cholesky, LU, QR and Solve on real matrices (the same steps and
      `eps` rules as Nx's default implementations, batched, a column at a time). Complex
      decompositions and the other blocks (Eigh, SVD, Determinant, AllClose, ...) run their
      default implementation, itself made of callbacks of this backend.
  """
  @behaviour Nx.Backend
  @enforce_keys [:ref, :device]
  defstruct [:ref, :device]

  import Kernel, except: [inspect: 2]
  alias Nx.Tensor, as: T
  alias ExCubecl.Native

  @type t :: %__MODULE__{ref: reference(), device: String.t()}

  @impl true
  def init(opts) do
    Keyword.validate!(opts, [:device])
  end

  ## Creation

  @impl true
  def constant(%T{} = out, %Complex{re: re, im: im}, opts), do: nx(:constant, out, [], [value: scalar(re), imag: scalar(im)], device(opts))
  def constant(%T{} = out, number, opts), do: nx(:constant, out, [], [value: scalar(number)], device(opts))

  @impl true
  def from_binary(%T{type: type, shape: shape} = out, binary, opts) do
    dev = device(opts)

    unless is_bitstring(binary),
      do: raise(ExBurn.Error.new("Nx.from_binary", "expects a binary", "#{type_name(type)}#{Kernel.inspect(shape)}"))

    case Native.buffer(stored_binary(binary, type), stored_shape(shape, type), stored_type(type, dev), dev) do
      {:ok, ref} -> wrap(out, ref, dev)
      {:error, e} -> raise ExBurn.Error.from("Nx.from_binary", e)
    end
  end

  @impl true
  def eye(%T{} = out, opts), do: nx(:eye, out, [], [], device(opts))

  @impl true
  def iota(%T{} = out, axis, opts), do: nx(:iota, out, [], [axis: axis || -1, flat: axis == nil], device(opts))

  ## Transfer

  @impl true
  def to_binary(%T{data: %__MODULE__{ref: ref}, type: type}, limit) do
    case Native.read(ref) do
      {:ok, bin} -> bin |> binary_part(0, min(byte_size(bin), limit * stored_bytes(type))) |> packed(type)
      {:error, e} -> raise ExBurn.Error.from("Nx.to_binary", e)
    end
  end

  @impl true
  def backend_copy(%T{} = t, __MODULE__, opts) do
    dev = device(opts)

    if dev == t.data.device,
      do: nx(:copy, t, [t]),
      else: to_device(t, dev)
  end

  def backend_copy(%T{} = t, backend, opts), do: backend.from_binary(t, to_binary(t, Nx.size(t)), opts)

  # Another device's copy: device to device where the runtime copies between its devices
  # (CUDA with NCCL), queued behind the work computing `t` rather than waiting for it.
  defp to_device(%T{data: %__MODULE__{ref: ref}} = t, dev) do
    case Native.to_device(ref, dev) do
      {:ok, out} -> %{t | data: %__MODULE__{ref: out, device: dev}}
      {:error, e} -> raise ExBurn.Error.from("Nx.backend_copy", e)
    end
  end

  @impl true
  def backend_transfer(%T{} = t, backend, opts) do
    backend_copy(t, backend, opts)
  after
    backend_deallocate(t)
  end

  @impl true
  def backend_deallocate(%T{data: %__MODULE__{ref: ref}}) do
    case Native.free(ref) do
      {:ok, true} -> :ok
      _ -> :already_deallocated
    end
  end

  @impl true
  def to_batched(%T{shape: shape} = out, %T{} = t, opts) do
    leftover = if opts[:leftover] == :repeat, do: :repeat, else: :discard
    nx_list(:to_batched, List.duplicate(out, batches(elem(t.shape, 0), elem(shape, 0), leftover)), [t], leftover: leftover)
  end

  @impl true
  def inspect(%T{} = t, inspect_opts) do
    limit = if inspect_opts.limit == :infinity, do: Nx.size(t), else: min(Nx.size(t), inspect_opts.limit + 1)
    Nx.Backend.inspect(t, to_binary(t, limit), inspect_opts)
  end

  @impl true
  def from_pointer(_pointer, _type, _shape, _opts, _backend_opts),
    do: raise(ExBurn.Error.new("Nx.from_pointer", "ExBurn does not share device memory through pointers"))

  @impl true
  def to_pointer(_tensor, _opts),
    do: raise(ExBurn.Error.new("Nx.to_pointer", "ExBurn does not share device memory through pointers"))

  ## Shape

  @impl true
  def reshape(out, t), do: nx(:reshape, out, [t])

  @impl true
  def squeeze(out, t, _axes), do: nx(:reshape, out, [t])

  @impl true
  def broadcast(out, t, _shape, axes), do: nx(:broadcast, out, [t], axes: axes)

  @impl true
  def transpose(out, t, axes), do: nx(:transpose, out, [t], axes: axes)

  @impl true
  def pad(out, t, pad_value, config), do: nx(:pad, out, [t, pad_value], config: Enum.flat_map(config, &Tuple.to_list/1))

  @impl true
  def reverse(out, t, axes), do: nx(:reverse, out, [t], axes: axes)

  @impl true
  def as_type(out, t), do: nx(:as_type, out, [t])

  @impl true
  def bitcast(out, t), do: nx(:bitcast, out, [t])

  @impl true
  def concatenate(out, tensors, axis), do: nx(:concatenate, out, on_one_device(tensors), axis: axis)

  @impl true
  def stack(out, tensors, axis), do: nx(:stack, out, on_one_device(tensors), axis: axis)

  @impl true
  def slice(out, t, starts, lengths, strides),
    do: nx(:slice, out, [t | dynamic(starts)], starts: static(starts), lengths: lengths, strides: strides)

  @impl true
  def put_slice(out, t, starts, slice), do: nx(:put_slice, out, [t, slice | dynamic(starts)], starts: static(starts))

  @impl true
  def select(out, pred, on_true, on_false), do: nx(:select, out, [pred, on_true, on_false])

  @impl true
  def clip(out, t, min, max), do: nx(:clip, out, [t, min, max])

  ## Indexing

  @impl true
  def gather(out, t, indices, opts), do: nx(:gather, out, [t, indices], axes: opts[:axes])

  @impl true
  def indexed_add(out, t, indices, updates, opts), do: nx(:indexed_add, out, [t, indices, updates], axes: opts[:axes])

  @impl true
  def indexed_put(out, t, indices, updates, opts), do: nx(:indexed_put, out, [t, indices, updates], axes: opts[:axes])

  @impl true
  def sort(out, t, opts), do: nx(:sort, out, [t], sort_opts(opts))

  @impl true
  def argsort(out, t, opts), do: nx(:argsort, out, [t], sort_opts(opts))

  defp sort_opts(opts), do: [axis: opts[:axis], descending: opts[:direction] == :desc]

  ## Aggregates

  for op <- [:all, :any, :sum, :product, :reduce_max, :reduce_min] do
    @impl true
    def unquote(op)(out, t, opts), do: nx(unquote(op), out, [t], reduce_opts(t, opts))
  end

  @impl true
  def argmax(out, t, opts), do: nx(:argmax, out, [t], arg_opts(opts))

  @impl true
  def argmin(out, t, opts), do: nx(:argmin, out, [t], arg_opts(opts))

  @impl true
  def reduce(out, t, acc, opts, fun) do
    case reducer!("Nx.reduce", fun, t) do
      {:ok, op} -> nx(:reduce, out, [t, acc], [op: op] ++ reduce_opts(t, opts))
      :fold -> folded(t, fn t, acc -> Nx.reduce(t, acc, opts, fun) end, [t, acc])
      :host -> on_host(t, [out, t, acc, opts, fun], &Nx.BinaryBackend.reduce/5)
    end
  end

  defp reduce_opts(t, opts), do: [axes: opts[:axes] || Nx.axes(t), keep_axes: opts[:keep_axes] || false]
  defp arg_opts(opts), do: [axis: opts[:axis] || -1, flat: opts[:axis] == nil, last: opts[:tie_break] == :high]

  ## Windows

  for op <- [:window_sum, :window_product, :window_max, :window_min] do
    @impl true
    def unquote(op)(out, t, window, opts), do: nx(unquote(op), out, [t], window_opts(t, window, opts))
  end

  @impl true
  def window_reduce(out, t, acc, window, opts, fun) do
    case reducer!("Nx.window_reduce", fun, t) do
      {:ok, op} -> nx(:window_reduce, out, [t, acc], [op: op] ++ window_opts(t, window, opts))
      :fold -> folded(t, fn t, acc -> Nx.window_reduce(t, acc, window, opts, fun) end, [t, acc])
      :host -> on_host(t, [out, t, acc, window, opts, fun], &Nx.BinaryBackend.window_reduce/6)
    end
  end

  @impl true
  def window_scatter_max(out, t, source, init, window, opts),
    do: nx(:window_scatter_max, out, [t, source, init], window_opts(t, window, opts))

  @impl true
  def window_scatter_min(out, t, source, init, window, opts),
    do: nx(:window_scatter_min, out, [t, source, init], window_opts(t, window, opts))

  # Nx gives the padding as {lo, hi} per axis and the strides and dilations per axis.
  defp window_opts(_t, window, opts) do
    rank = tuple_size(window)

    [
      window: Tuple.to_list(window),
      strides: normalize(opts[:strides], rank),
      padding: Enum.flat_map(opts[:padding] || List.duplicate({0, 0}, rank), &Tuple.to_list/1),
      dilations: normalize(opts[:window_dilations], rank)
    ]
  end

  defp normalize(nil, rank), do: List.duplicate(1, rank)
  defp normalize(n, rank) when is_integer(n), do: List.duplicate(n, rank)
  defp normalize(list, _rank), do: list

  ## Linear algebra

  @impl true
  def dot(out, a, contract_a, batch_a, b, contract_b, batch_b),
    do: nx(:dot, out, [a, b], contract_a: contract_a, batch_a: batch_a, contract_b: contract_b, batch_b: batch_b)

  @impl true
  def conv(out, t, k, opts) do
    rank = tuple_size(t.shape)

    nx(:conv, out, [t, k],
      strides: opts[:strides],
      padding: Enum.flat_map(opts[:padding], &Tuple.to_list/1),
      input_dilation: opts[:input_dilation],
      kernel_dilation: opts[:kernel_dilation],
      feature_groups: opts[:feature_group_size],
      batch_groups: opts[:batch_group_size],
      input_permutation: opts[:input_permutation] || Enum.to_list(0..(rank - 1)),
      kernel_permutation: opts[:kernel_permutation] || Enum.to_list(0..(rank - 1)),
      output_permutation: opts[:output_permutation] || Enum.to_list(0..(rank - 1))
    )
  end

  @impl true
  def triangular_solve(out, a, b, opts) do
    if not ExBurn.Defn.Recorder.recording?() and singular?(a), do: raise(ArgumentError, "can't solve for singular matrix")
    nx(:triangular_solve, out, [a, b], left_side: opts[:left_side], lower: opts[:lower], transform_a: opts[:transform_a])
  end

  # A zero on the diagonal, which BinaryBackend's substitution raises on: one reduction on the
  # device and one number back. (Compiled programs don't stop: they give infinities and NaN.)
  defp singular?(%T{shape: shape, data: %__MODULE__{device: dev}} = a) do
    eye = Nx.eye(shape, type: :u8, backend: {__MODULE__, device: dev})
    a |> Nx.equal(0) |> Nx.logical_and(eye) |> Nx.any() |> Nx.to_number() == 1
  end

  # The native solve refuses a zero pivot, where Nx's default raises ArgumentError.
  defp solve(out, a, b) do
    nx(:solve, out, [a, b])
  rescue
    e in ExBurn.Error ->
      if e.reason =~ "singular", do: raise(ArgumentError, "can't solve for singular matrix"), else: reraise(e, __STACKTRACE__)
  end

  @impl true
  def fft(out, t, opts), do: nx(:fft, out, [t], length: opts[:length], axis: opts[:axis] || -1)

  @impl true
  def ifft(out, t, opts), do: nx(:ifft, out, [t], length: opts[:length], axis: opts[:axis] || -1)

  ## Elementwise

  binary_ops =
    [:add, :subtract, :multiply, :pow, :remainder, :divide, :atan2, :min, :max, :quotient] ++
      [:bitwise_and, :bitwise_or, :bitwise_xor, :left_shift, :right_shift]

  for op <- binary_ops do
    @impl true
    def unquote(op)(out, a, b), do: nx(unquote(op), out, [a, b], compute: type_name(out.type))
  end

  # Comparisons and logical ops compute in the inputs' merged type and give u8.
  for op <- [:equal, :not_equal, :greater, :less, :greater_equal, :less_equal, :logical_and, :logical_or, :logical_xor] do
    @impl true
    def unquote(op)(out, a, b), do: nx(unquote(op), out, [a, b], compute: type_name(Nx.Type.merge(a.type, b.type)))
  end

  unary_ops =
    Enum.map(Nx.Shared.unary_math_funs(), &elem(&1, 0)) ++
      [:abs, :bitwise_not, :ceil, :conjugate, :floor, :negate, :round, :sign] ++
      [:count_leading_zeros, :population_count, :real, :imag, :is_nan, :is_infinity]

  for op <- unary_ops do
    @impl true
    def unquote(op)(out, t), do: nx(unquote(op), out, [t])
  end

  ## Block

  @impl true
  def block(%Nx.Block.CumulativeSum{} = b, out, [t | _], _fun), do: cumulative(:cumulative_sum, b, out, t)
  def block(%Nx.Block.CumulativeProduct{} = b, out, [t | _], _fun), do: cumulative(:cumulative_product, b, out, t)
  def block(%Nx.Block.CumulativeMax{} = b, out, [t | _], _fun), do: cumulative(:cumulative_max, b, out, t)
  def block(%Nx.Block.CumulativeMin{} = b, out, [t | _], _fun), do: cumulative(:cumulative_min, b, out, t)
  def block(%Nx.Block.Take{axis: axis}, out, [t, idx | _], _fun), do: nx(:take, out, [t, idx], axis: axis)

  def block(%Nx.Block.TakeAlongAxis{axis: axis}, out, [t, idx | _], _fun),
    do: nx(:take_along_axis, out, [t, idx], axis: axis)

  def block(%Nx.Block.TopK{k: k}, {values, indices}, [t | _], _fun),
    do: List.to_tuple(nx_list(:top_k, [values, indices], [t], k: k, index_type: type_name(indices.type)))

  def block(%kind{axes: axes, lengths: lengths, eps: eps}, out, [t | _], _fun) when kind in [Nx.Block.FFT2, Nx.Block.IFFT2] do
    op = if kind == Nx.Block.FFT2, do: :fft2, else: :ifft2
    nx(op, out, [t], [axes: axes, lengths: lengths] ++ eps_opt(eps))
  end

  def block(%kind{axis: axis, length: length, eps: eps}, out, [t | _], _fun) when kind in [Nx.Block.RFFT, Nx.Block.IRFFT] do
    op = if kind == Nx.Block.RFFT, do: :rfft, else: :irfft
    nx(op, out, [t], [axis: [axis], length: length] ++ eps_opt(eps))
  end

  def block(%Nx.Block.LinAlg.Cholesky{} = b, out, [t] = args, fun) do
    if complex?(t), do: apply(fun, [b | args]), else: nx(:cholesky, out, [t])
  end

  def block(%Nx.Block.LinAlg.LU{} = b, {p, l, u}, [t] = args, fun) do
    if complex?(t) do
      apply(fun, [b | args])
    else
      [l, u, p] = nx_list(:lu, [l, u, p], [t], p_type: type_name(p.type))
      {p, l, u}
    end
  end

  def block(%Nx.Block.LinAlg.QR{eps: eps, mode: mode} = b, {q, r}, [t] = args, fun) do
    if complex?(t), do: apply(fun, [b | args]), else: List.to_tuple(nx_list(:qr, [q, r], [t], eps: eps, mode: to_string(mode)))
  end

  def block(%Nx.Block.LinAlg.Solve{} = s, out, [a, b] = args, fun) do
    if complex?(a) or complex?(b), do: apply(fun, [s | args]), else: solve(out, a, b)
  end

  def block(struct, _out, args, fun), do: apply(fun, [struct | args])

  defp eps_opt(nil), do: []
  defp eps_opt(eps), do: [eps: eps]

  defp complex?(%T{type: {:c, _}}), do: true
  defp complex?(_), do: false

  defp cumulative(op, %{axis: axis, reverse: reverse}, out, t), do: nx(op, out, [t], axis: axis, reverse: reverse)

  ## Helpers

  @doc false
  # The NIF op of an Nx callback: one call, `inputs` (tensors of any backend; others are
  # uploaded to the device of the first ExBurn input) to a tensor shaped as `out`.
  def nx(op, %T{} = out, inputs, opts \\ [], dev \\ nil) do
    [result] = nx_list(op, [out], inputs, opts, dev)
    result
  end

  defp nx_list(op, [first | _] = outs, inputs, opts, dev \\ nil) do
    dev = dev || input_device(inputs)
    name = "Nx.#{op}"
    refs = Enum.map(inputs, &ref!(&1, dev, name))
    opts = [type: type_name(first.type), shape: Tuple.to_list(first.shape)] ++ complex_flags(first, inputs) ++ narrow_flags(outs, inputs) ++ opts

    case ExBurn.Defn.Recorder.run_kernel("nx_#{op}", refs, opts, dev, length(outs)) do
      {:ok, results} when length(results) == length(outs) -> Enum.zip_with(outs, results, &wrap(&1, elem(&2, 0), dev))
      {:ok, results} -> Enum.map(results, &wrap(first, elem(&1, 0), dev))
      {:error, e} -> raise ExBurn.Error.from(name, e)
    end
  end

  defp wrap(%T{} = out, ref, dev), do: %{out | data: %__MODULE__{ref: ref, device: dev}}

  defp ref!(%T{data: %__MODULE__{ref: ref}}, _dev, _op), do: ref

  defp ref!(%T{} = t, dev, op) do
    {binary, shape, stored} = device_input(t, dev)

    case Native.buffer(binary, shape, stored, dev) do
      {:ok, ref} -> ref
      {:error, e} -> raise ExBurn.Error.from(op, e)
    end
  end

  defp ref!(other, _dev, op), do: raise(ExBurn.Error.new(op, "expects tensors", Kernel.inspect(other, limit: 5)))

  # Tensors joined by concatenate or stack: those on other devices than the first ExBurn
  # input's are copied there (device to device where the runtime can), as `Nx.Serving` joins
  # the parts of one request that ran on the partitions of two devices.
  defp on_one_device(tensors) do
    dev = input_device(tensors)

    Enum.map(tensors, fn
      %T{data: %__MODULE__{device: other}} = t when other != dev -> to_device(t, dev)
      t -> t
    end)
  end

  defp input_device(inputs) do
    Enum.find_value(inputs, &match?(%T{data: %__MODULE__{}}, &1) && &1.data.device) || ExBurn.default_device_spec()
  end

  defp device(opts) do
    case opts[:device] do
      nil -> ExBurn.default_device_spec()
      dev -> ExBurn.device_spec(dev)
    end
  end

  @doc false
  def type_name(type), do: Nx.Type.to_string(type)

  # How a tensor is stored on the device. A complex tensor: its parts (f32 for c64, f64 for
  # c128) with a trailing axis of 2 (Nx's binary layout). A narrow type (the NIF's
  # `ops/nx/narrow.rs`), computed wider by every entry: 8-bit floats as their bits in u8,
  # sub-byte integers one per byte. (bf16 is the backend's own on every device.)
  defp stored_shape(shape, {:c, _}), do: Tuple.to_list(shape) ++ [2]
  defp stored_shape(shape, _type), do: Tuple.to_list(shape)
  defp stored_type({:c, bits}, _dev), do: type_name({:f, div(bits, 2)})
  defp stored_type(type, _dev), do: if(narrow?(type), do: narrow_storage(type), else: type_name(type))

  defp narrow_storage({kind, _}) when kind in [:f, :f8_e4m3fn], do: "u8"
  defp narrow_storage({:s, _}), do: "s8"
  defp narrow_storage({:u, _}), do: "u8"

  # Whether `type` is stored narrow (in a container dtype, computed wider by each entry).
  defp narrow?({:f, 8}), do: true
  defp narrow?({:f8_e4m3fn, 8}), do: true
  defp narrow?({kind, bits}) when kind in [:s, :u] and bits < 8, do: true
  defp narrow?(_type), do: false

  # Sub-byte integers: Nx packs them (the first element in the high bits); the device holds one
  # per byte.
  defp stored_binary(bits, {:s, n}) when n < 8, do: for(<<x::signed-size(n) <- bits>>, into: <<>>, do: <<x::signed-8>>)
  defp stored_binary(bits, {:u, n}) when n < 8, do: for(<<x::unsigned-size(n) <- bits>>, into: <<>>, do: <<x::unsigned-8>>)
  defp stored_binary(binary, _type), do: binary

  defp packed(bytes, {:s, n}) when n < 8, do: for(<<x::signed-8 <- bytes>>, into: <<>>, do: <<x::signed-size(n)>>)
  defp packed(bytes, {:u, n}) when n < 8, do: for(<<x::unsigned-8 <- bytes>>, into: <<>>, do: <<x::unsigned-size(n)>>)
  defp packed(binary, _type), do: binary

  defp stored_bytes({_, bits}) when bits < 8, do: 1
  defp stored_bytes({_, bits}), do: div(bits, 8)

  @doc false
  # The shape and dtype name of `t` on device `dev` (`stored_shape/2`, `stored_type/2`).
  def device_shape(%T{shape: shape, type: type}), do: stored_shape(shape, type)
  @doc false
  def device_type(%T{type: type}, dev), do: stored_type(type, dev)

  @doc false
  # `{binary, shape, dtype name}` of a tensor of another backend, to upload to `dev`.
  def device_input(%T{type: type, shape: shape} = t, dev), do: {stored_binary(Nx.to_binary(t), type), stored_shape(shape, type), stored_type(type, dev)}

  # The narrow types of the inputs and outputs (option `narrow` / `narrow_out`), where any is.
  defp narrow_flags(outs, inputs) do
    name = fn %T{type: type} -> if narrow?(type), do: type_name(type), else: "" end
    {ins, outs} = {Enum.map(inputs, name), Enum.map(outs, name)}
    if Enum.all?(ins ++ outs, &(&1 == "")), do: [], else: [narrow: ins, narrow_out: outs]
  end

  # Which inputs are complex, where any tensor of the call is.
  defp complex_flags(out, inputs) do
    flags = Enum.map(inputs, &match?(%T{type: {:c, _}}, &1))
    if match?({:c, _}, out.type) or true in flags, do: [complex: flags], else: []
  end

  defp scalar(n) when is_number(n), do: n
  defp scalar(:nan), do: :nan
  defp scalar(:infinity), do: :infinity
  defp scalar(:neg_infinity), do: :neg_infinity

  defp static(starts), do: Enum.map(starts, fn s when is_integer(s) -> s; _ -> -1 end)
  defp dynamic(starts), do: Enum.filter(starts, &match?(%T{}, &1))

  defp batches(n, size, :repeat), do: div(n + size - 1, size)
  defp batches(n, size, :discard), do: div(n, size)

  # `{:ok, op}` for an associative Nx function of two scalars (one kernel), found by tracing
  # it; `:fold` for any other Nx function; `:host` for a function that can't be traced (it
  # computes on numbers, `Nx.to_number(a) + Nx.to_number(b)`, or uses Elixir's own `+` where
  # defn's is not imported): it then runs as Nx.BinaryBackend runs it, scalar by scalar.
  defp reducer!(_op, fun, %T{type: type}) do
    template = Nx.template({}, type)
    expr = Nx.Defn.debug_expr(fun).(template, template)

    case expr do
      %T{data: %Nx.Defn.Expr{op: name, args: [%T{data: %{op: :parameter}}, %T{data: %{op: :parameter}}]}}
      when name in [:add, :multiply, :max, :min, :logical_and, :logical_or, :bitwise_and, :bitwise_or] ->
        {:ok, name}

      %T{} ->
        :fold

      _ ->
        :host
    end
  rescue
    _ -> :host
  end

  # Runs a BinaryBackend callback on host copies of the tensors in `args` (the first, `out`,
  # is a template) and gives the result back on `t`'s device.
  defp on_host(%T{data: %__MODULE__{device: dev}}, [out | args], callback) do
    args = Enum.map(args, fn %T{} = a -> Nx.backend_copy(a, Nx.BinaryBackend); other -> other end)
    Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(callback, [out | args]) end) |> Nx.backend_transfer({__MODULE__, device: dev})
  end

  # A reduction by any other function: compiled, folding it element by element on the device
  # (ExBurn.Defn.Fold), in one NIF call once compiled.
  defp folded(%T{data: %__MODULE__{device: dev}}, fun, args), do: apply(Nx.Defn.jit(fun, compiler: ExBurn.Defn.Compiler, device: dev), args)
end
