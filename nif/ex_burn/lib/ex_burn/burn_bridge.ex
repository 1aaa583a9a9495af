defmodule ExBurn.BurnBridge do
  @moduledoc """
  Direct tensor operations on `%ExBurn.Tensor{}` handles, bypassing the Nx layer: each
  operation is one NIF call of the project's op table (the entries behind `ExBurn.Backend`
  and `ExCubecl.run_kernel/3`), and its result stays on the device until `to_nx/1` reads it.

      t1 = ExBurn.BurnBridge.zeros([3, 3], :f32)
      t2 = ExBurn.BurnBridge.ones([3, 3], :f32)
      t3 = ExBurn.BurnBridge.add(t1, t2)
      t4 = ExBurn.BurnBridge.matmul(t1, t2)
      t5 = ExBurn.BurnBridge.relu(t3)
      {:ok, nx_tensor} = ExBurn.BurnBridge.to_nx(t3)

  Tensors are created on `ExBurn.default_device_spec/0` unless a `:device` option (`:gpu`,
  `:cpu` or a device string) says otherwise; an operation runs on its inputs' device.
  Operands may be `%ExBurn.Tensor{}`s, bare NIF references of tensors, Nx tensors (uploaded),
  or, as the second operand of an arithmetic op, numbers. Elementwise ops broadcast as Nx
  does; results carry Burn types (`:f32`, `:f64`, `:i32`, `:i64`; see `ExBurn.Tensor`).

  Every function raises `ExBurn.Error` naming the operation, the shapes and the types on bad
  input; `ExBurn.NifHelper` gives the same operations as `{:ok, result}` / `{:error, reason}`.
  """

  alias ExBurn.Tensor, as: BT

  @type tensor :: BT.t() | reference() | Nx.Tensor.t()
  @type operand :: tensor() | number()

  ## Creation

  @doc """
  Creates a tensor of zeros of `shape` (a list, or a tuple) and Burn `type` (default `:f32`).
  Option: `:device`.

      iex> t = ExBurn.BurnBridge.zeros([3, 3], :f32)
      iex> {t.shape, t.type}
      {[3, 3], :f32}
  """
  @spec zeros([non_neg_integer()] | tuple(), BT.burn_type(), keyword()) :: BT.t()
  def zeros(shape, type \\ :f32, opts \\ []), do: full(shape, 0, type, opts, :zeros)

  @doc "Creates a tensor of ones (arguments as `zeros/3`). `ExBurn.BurnBridge.ones([3, 3], :f32)`"
  @spec ones([non_neg_integer()] | tuple(), BT.burn_type(), keyword()) :: BT.t()
  def ones(shape, type \\ :f32, opts \\ []), do: full(shape, 1, type, opts, :ones)

  @doc "Creates a tensor of `shape` filled with `value`. `ExBurn.BurnBridge.full([2], 7, :i32)`"
  @spec full([non_neg_integer()] | tuple(), number(), BT.burn_type(), keyword()) :: BT.t()
  def full(shape, value, type \\ :f32, opts \\ []), do: full(shape, value, type, opts, :full)

  defp full(shape, value, type, opts, op) do
    run(op, [shape, type], fn ->
      value
      |> Nx.tensor(type: nx_type!(type), backend: backend(opts))
      |> Nx.broadcast(shape!(shape))
    end)
  end

  @doc "Creates the `size`×`size` identity matrix of `type`. `ExBurn.BurnBridge.eye(3, :f32)`"
  @spec eye(pos_integer(), BT.burn_type(), keyword()) :: BT.t()
  def eye(size, type \\ :f32, opts \\ []) do
    run(:eye, [size, type], fn -> Nx.eye(size, type: nx_type!(type), backend: backend(opts)) end)
  end

  @doc """
  Creates a tensor of `shape` counting along `axis` (`nil`: counting over the flattened
  tensor). `ExBurn.BurnBridge.iota([2, 3], 1, :i32)` rows `[0, 1, 2]`.
  """
  @spec iota([non_neg_integer()] | tuple(), integer() | nil, BT.burn_type(), keyword()) :: BT.t()
  def iota(shape, axis, type \\ :i32, opts \\ []) do
    run(:iota, [shape, axis, type], fn -> Nx.iota(shape!(shape), axis: axis, type: nx_type!(type), backend: backend(opts)) end)
  end

  @doc """
  Creates a tensor of `shape` of values drawn uniformly from `[low, high)` (float types) on
  the device, by the op table's `random_uniform` entry (one launch).
  """
  @spec random([non_neg_integer()] | tuple(), BT.burn_type(), number(), number(), keyword()) :: BT.t()
  def random(shape, type \\ :f32, low \\ 0.0, high \\ 1.0, opts \\ []) do
    run(:random, [shape, type, low, high], fn ->
      unless type in [:f32, :f64], do: raise(ArgumentError, "random values are of a float type (:f32, :f64), got #{inspect(type)}")
      unless is_number(low) and is_number(high) and low < high, do: raise(ArgumentError, "expects low < high, got #{inspect({low, high})}")
      dev = device_opt(opts)
      shape = shape!(shape) |> Tuple.to_list()

      [buffer] =
        ExCubecl.run_kernel!(:random_uniform, [], shape: shape, dtype: BT.dtype_name(type), low: low / 1, high: high / 1, device: dev)

      %BT{ref: buffer.ref, shape: shape, type: type}
    end)
  end

  @doc """
  Creates a tensor from a (nested) list of numbers, of Burn `type` (default: `:f32` for
  floats, `:i32` for integers). `ExBurn.BurnBridge.tensor([[1.0, 2.0]])`
  """
  @spec tensor(list() | number(), BT.burn_type() | nil, keyword()) :: BT.t()
  def tensor(data, type \\ nil, opts \\ []) do
    run(:tensor, [type], fn ->
      t = Nx.tensor(data, backend: Nx.BinaryBackend)
      type = type || BT.nx_type_to_burn(t.type)
      Nx.backend_copy(Nx.as_type(t, nx_type!(type)), backend(opts))
    end)
  end

  @doc "Creates a tensor from raw native-endian `data` (see `ExBurn.Tensor.from_binary/4`)."
  @spec from_binary(binary(), [non_neg_integer()], BT.burn_type(), keyword()) :: BT.t()
  def from_binary(data, shape, type, opts \\ []), do: ok!(BT.from_binary(data, shape, type, opts), :from_binary)

  ## Conversion and devices

  @doc """
  Converts a Burn tensor to Nx (on the host): `{:ok, nx_tensor}` or `{:error, reason}`.

      iex> {:ok, nx} = ExBurn.BurnBridge.to_nx(ExBurn.BurnBridge.ones([2], :f32))
      iex> Nx.to_list(nx)
      [1.0, 1.0]
  """
  @spec to_nx(BT.t()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
  def to_nx(tensor), do: BT.to_nx(bt!(tensor, :to_nx))

  @doc "Converts an Nx tensor to a Burn tensor: `{:ok, tensor}` (see `ExBurn.Tensor.from_nx/2`)."
  @spec from_nx(Nx.Tensor.t(), keyword()) :: {:ok, BT.t()} | {:error, String.t()}
  def from_nx(tensor, opts \\ []), do: BT.from_nx(tensor, opts)

  @doc "The tensor's raw bytes (native byte order), read from the device."
  @spec to_binary(tensor()) :: binary()
  def to_binary(tensor), do: run(:to_binary, [tensor], fn -> tensor |> nx!() |> Nx.to_binary() end, :raw)

  @doc "The tensor's shape (a list)."
  @spec shape(tensor()) :: [non_neg_integer()]
  def shape(tensor), do: bt!(tensor, :shape).shape

  @doc "The device string of the tensor (`\"wgpu:cpu\"`, `\"cuda:0\"`, ...)."
  @spec device(tensor()) :: String.t()
  def device(tensor), do: run(:device, [tensor], fn -> nx!(tensor).data.device end, :raw)

  @doc """
  A copy of `tensor` on the best hardware GPU (CUDA, else a hardware Vulkan / Metal adapter);
  the tensor itself when it is there already. Raises `ExBurn.Error` naming what is missing
  on a machine without one.
  """
  @spec to_gpu(tensor()) :: BT.t()
  def to_gpu(tensor), do: to_device(tensor, :gpu, :to_gpu)

  @doc "A copy of `tensor` on the CPU device (lavapipe / llvmpipe through wgpu); see `to_gpu/1`."
  @spec to_cpu(tensor()) :: BT.t()
  def to_cpu(tensor), do: to_device(tensor, :cpu, :to_cpu)

  @doc "A copy of `tensor` on `device` (`:gpu`, `:cpu` or a device string)."
  @spec to_device(tensor(), atom() | String.t()) :: BT.t()
  def to_device(tensor, device), do: to_device(tensor, device, :to_device)

  defp to_device(tensor, device, op) do
    run(op, [tensor], fn ->
      t = nx!(tensor)
      dev = ExBurn.device_spec(device)
      if t.data.device == dev, do: t, else: Nx.backend_copy(t, {ExBurn.Backend, device: dev})
    end)
  end

  @doc "Frees the tensor's device memory now (see `ExBurn.Tensor.free/1`)."
  @spec free(tensor()) :: :ok
  def free(tensor), do: BT.free(bt!(tensor, :free))

  @doc "Whether a hardware GPU is available (`ExBurn.gpu_available?/0`)."
  @spec gpu_available?() :: boolean()
  def gpu_available?, do: ExBurn.gpu_available?()

  @doc "The active device's name (`ExBurn.device_name/0`)."
  @spec device_name() :: String.t()
  def device_name, do: ExBurn.device_name()

  ## Elementwise

  for {name, fun, doc} <- [
        {:add, :add, "Elementwise `a + b`"},
        {:sub, :subtract, "Elementwise `a - b`"},
        {:mul, :multiply, "Elementwise `a * b`"},
        {:div, :divide, "Elementwise `a / b` (a float result)"},
        {:pow, :pow, "Elementwise `a ** b`"}
      ] do
    @doc "#{doc}, broadcasting as Nx does; `b` may be a number."
    @spec unquote(name)(operand(), operand()) :: BT.t()
    def unquote(name)(a, b), do: run(unquote(name), [a, b], fn -> Nx.unquote(fun)(nx!(a), operand!(b)) end)
  end

  for {name, fun} <- [neg: :negate, abs: :abs, exp: :exp, log: :log, sqrt: :sqrt, sigmoid: :sigmoid, tanh: :tanh] do
    @doc "Elementwise `#{fun}`."
    @spec unquote(name)(tensor()) :: BT.t()
    def unquote(name)(a), do: run(unquote(name), [a], fn -> Nx.unquote(fun)(nx!(a)) end)
  end

  @doc """
  `max(a, 0)` elementwise.

      iex> t = ExBurn.BurnBridge.tensor([-1.0, 2.0])
      iex> ExBurn.BurnBridge.relu(t) |> ExBurn.BurnBridge.to_nx() |> elem(1) |> Nx.to_list()
      [0.0, 2.0]
  """
  @spec relu(tensor()) :: BT.t()
  def relu(a), do: run(:relu, [a], fn -> t = nx!(a); Nx.max(t, Nx.tensor(0, type: t.type)) end)

  @doc "Softmax along `dim` (default: the last), by the op table's `softmax` entry."
  @spec softmax(tensor(), integer()) :: BT.t()
  def softmax(a, dim \\ -1) do
    run(:softmax, [a, dim], fn ->
      t = nx!(a)
      unless is_integer(dim) and dim >= -tuple_size(t.shape) and dim < tuple_size(t.shape),
        do: raise(ArgumentError, "dim #{inspect(dim)} is out of range for a tensor of rank #{tuple_size(t.shape)}")

      kernel(:softmax, [t], axis: dim)
    end)
  end

  @doc """
  Layer normalization along `dim` (default: the last): `(a - mean) / sqrt(var + eps)`, with
  the mean and the (biased) variance taken along `dim`.
  """
  @spec layer_norm(tensor(), integer(), float()) :: BT.t()
  def layer_norm(a, dim \\ -1, eps \\ 1.0e-5) do
    run(:layer_norm, [a, dim, eps], fn ->
      t = nx!(a)
      axis = Nx.axis_index(t, dim)
      mean = Nx.mean(t, axes: [axis], keep_axes: true)
      centered = Nx.subtract(t, mean)
      var = Nx.mean(Nx.multiply(centered, centered), axes: [axis], keep_axes: true)
      Nx.multiply(centered, Nx.rsqrt(Nx.add(var, eps)))
    end)
  end

  ## Linear algebra and layout

  @doc """
  The matrix product of `a` and `b` (batched over leading dimensions as Burn's matmul:
  `[..., m, k] x [..., k, n]`).

      iex> a = ExBurn.BurnBridge.ones([2, 3], :f32)
      iex> ExBurn.BurnBridge.matmul(a, ExBurn.BurnBridge.ones([3, 4], :f32)).shape
      [2, 4]
  """
  @spec matmul(tensor(), tensor()) :: BT.t()
  def matmul(a, b) do
    run(:matmul, [a, b], fn ->
      {x, y} = {nx!(a), nx!(b)}

      if tuple_size(x.shape) < 2 or tuple_size(y.shape) < 2,
        do: raise(ArgumentError, "matmul takes tensors of rank 2 or more (use dot/2 for vectors)")

      kernel(:matmul, [x, y], [])
    end)
  end

  @doc "`Nx.dot/2` of `a` and `b` (vectors, matrices, or the last axis of `a` with the first of `b`)."
  @spec dot(tensor(), tensor()) :: BT.t()
  def dot(a, b), do: run(:dot, [a, b], fn -> Nx.dot(nx!(a), nx!(b)) end)

  @doc "Transposes a tensor (reverses its axes; a matrix's rows and columns)."
  @spec transpose(tensor()) :: BT.t()
  def transpose(a), do: run(:transpose, [a], fn -> Nx.transpose(nx!(a)) end)

  @doc "Swaps dimensions `dim0` and `dim1`."
  @spec transpose(tensor(), integer(), integer()) :: BT.t()
  def transpose(a, dim0, dim1) do
    run(:transpose, [a, dim0, dim1], fn ->
      t = nx!(a)
      {d0, d1} = {Nx.axis_index(t, dim0), Nx.axis_index(t, dim1)}
      axes = Nx.axes(t) |> List.replace_at(d0, d1) |> List.replace_at(d1, d0)
      Nx.transpose(t, axes: axes)
    end)
  end

  @doc "Reshapes to `shape` (a list or tuple) of the same size."
  @spec reshape(tensor(), [non_neg_integer()] | tuple()) :: BT.t()
  def reshape(a, shape), do: run(:reshape, [a, shape], fn -> Nx.reshape(nx!(a), shape!(shape)) end)

  @doc "Broadcasts to `shape` (Nx's rules: dimensions aligned from the right)."
  @spec broadcast(tensor(), [non_neg_integer()] | tuple()) :: BT.t()
  def broadcast(a, shape), do: run(:broadcast, [a, shape], fn -> Nx.broadcast(nx!(a), shape!(shape)) end)

  @doc "Concatenates `a` and `b` along dimension 0, or a list of tensors along `dim`."
  @spec concat(tensor() | [tensor()], tensor() | integer()) :: BT.t()
  def concat(tensors, dim \\ 0)

  def concat(tensors, dim) when is_list(tensors) and is_integer(dim),
    do: run(:concat, tensors, fn -> Nx.concatenate(Enum.map(tensors, &nx!/1), axis: dim) end)

  def concat(a, b), do: concat([a, b], 0)

  @doc """
  Slices by `ranges`, one per leading dimension: `{start, stop}` (stop exclusive) or a
  `Range` (`0..1` takes rows 0 and 1); dimensions without a range are taken whole.
  """
  @spec slice(tensor(), [{non_neg_integer(), non_neg_integer()} | Range.t()]) :: BT.t()
  def slice(a, ranges) do
    run(:slice, [a, ranges], fn ->
      t = nx!(a)
      dims = Tuple.to_list(t.shape)

      unless is_list(ranges) and length(ranges) <= length(dims),
        do: raise(ArgumentError, "expects a list of at most #{length(dims)} ranges, got #{inspect(ranges)}")

      {starts, lengths} =
        dims
        |> Enum.with_index()
        |> Enum.map(fn {dim, i} -> span!(Enum.at(ranges, i, {0, dim}), dim) end)
        |> Enum.unzip()

      Nx.slice(t, starts, lengths)
    end)
  end

  defp span!({start, stop}, dim) when is_integer(start) and is_integer(stop) and 0 <= start and start <= stop and stop <= dim,
    do: {start, stop - start}

  defp span!(%Range{first: first, last: last, step: 1}, dim) when 0 <= first and first <= last and last < dim,
    do: {first, last - first + 1}

  defp span!(range, dim), do: raise(ArgumentError, "range #{inspect(range)} does not fit a dimension of #{dim}")

  @doc """
  2-D convolution of `input` `[batch, in_channels, h, w]` with `kernel`
  `[out_channels, in_channels, kh, kw]`; `stride` and `padding` are integers (both spatial
  dimensions) or `{h, w}` pairs.
  """
  @spec conv2d(tensor(), tensor(), pos_integer() | {pos_integer(), pos_integer()}, non_neg_integer() | {non_neg_integer(), non_neg_integer()}) ::
          BT.t()
  def conv2d(input, kernel, stride \\ 1, padding \\ 0) do
    run(:conv2d, [input, kernel, stride, padding], fn ->
      {x, k} = {nx!(input), nx!(kernel)}

      unless tuple_size(x.shape) == 4 and tuple_size(k.shape) == 4,
        do: raise(ArgumentError, "expects input [batch, channels, h, w] and kernel [out, in, kh, kw]")

      {sh, sw} = pair!(stride, :stride, 1)
      {ph, pw} = pair!(padding, :padding, 0)
      Nx.conv(x, k, strides: [sh, sw], padding: [{ph, ph}, {pw, pw}])
    end)
  end

  defp pair!(n, _what, min) when is_integer(n) and n >= min, do: {n, n}
  defp pair!({a, b}, _what, min) when is_integer(a) and is_integer(b) and a >= min and b >= min, do: {a, b}
  defp pair!([a, b], what, min), do: pair!({a, b}, what, min)
  defp pair!(other, what, _min), do: raise(ArgumentError, "bad #{what} #{inspect(other)}: an integer or an {h, w} pair")

  ## Reductions

  for {name, fun, doc} <- [
        {:sum, :sum, "The sum"},
        {:mean, :mean, "The mean"},
        {:max, :reduce_max, "The maximum"},
        {:min, :reduce_min, "The minimum"}
      ] do
    @doc "#{doc} of every element (a scalar tensor), or along `axes` (a list of dimensions, or one)."
    @spec unquote(name)(tensor(), [integer()] | integer() | nil) :: BT.t()
    def unquote(name)(a, axes \\ nil) do
      run(unquote(name), [a, axes], fn ->
        case axes do
          nil -> Nx.unquote(fun)(nx!(a))
          axes -> Nx.unquote(fun)(nx!(a), axes: List.wrap(axes))
        end
      end)
    end
  end

  ## Helpers

  # `fun`'s result as a Burn tensor (`:raw`: as it is); any failure as an ExBurn.Error naming
  # the operation and its operands.
  defp run(op, args, fun, result \\ :tensor) do
    value = fun.()

    case {result, value} do
      {:raw, value} -> value
      {:tensor, %BT{} = t} -> t
      {:tensor, %Nx.Tensor{} = t} -> BT.from_backend(t)
    end
  rescue
    e in ExBurn.Error -> reraise %{e | op: "ExBurn.BurnBridge.#{op}"}, __STACKTRACE__
    e -> reraise ExBurn.Error.new("ExBurn.BurnBridge.#{op}", Exception.message(e), describe(args)), __STACKTRACE__
  end

  defp describe(args), do: Enum.map_join(args, ", ", &describe_one/1)
  defp describe_one(%BT{shape: shape, type: type}), do: "#{type}#{inspect(shape)}"
  defp describe_one(%Nx.Tensor{shape: shape, type: type}), do: "#{Nx.Type.to_string(type)}#{inspect(shape)}"
  defp describe_one(other), do: inspect(other, limit: 5)

  # An operand as an Nx tensor on ExBurn.Backend (the same resource; no copy for Burn tensors).
  defp nx!(%BT{} = t), do: BT.to_backend(t)
  defp nx!(ref) when is_reference(ref), do: ref |> BT.from_ref() |> ok!(:tensor) |> BT.to_backend()
  defp nx!(%Nx.Tensor{data: %ExBurn.Backend{}} = t), do: t
  defp nx!(%Nx.Tensor{} = t), do: Nx.backend_copy(t, {ExBurn.Backend, device: ExBurn.default_device_spec()})
  defp nx!(other), do: raise(ArgumentError, "expects a tensor (%ExBurn.Tensor{}, a tensor reference or an Nx tensor), got #{inspect(other, limit: 5)}")

  defp operand!(n) when is_number(n), do: n
  defp operand!(t), do: nx!(t)

  defp bt!(%BT{} = t, _op), do: t
  defp bt!(ref, op) when is_reference(ref), do: ok!(BT.from_ref(ref), op)
  defp bt!(%Nx.Tensor{} = t, op), do: ok!(BT.from_nx(t), op)
  defp bt!(other, op), do: raise(ExBurn.Error.new("ExBurn.BurnBridge.#{op}", "expects an %ExBurn.Tensor{}", inspect(other, limit: 5)))

  defp ok!({:ok, value}, _op), do: value
  defp ok!({:error, reason}, op), do: raise(ExBurn.Error.new("ExBurn.BurnBridge.#{op}", reason))

  # One kernel of the op table on Nx tensors of ExBurn.Backend (Burn's semantics).
  defp kernel(name, inputs, opts) do
    buffers = for %Nx.Tensor{data: %ExBurn.Backend{ref: ref, device: dev}, shape: shape, type: type} <- inputs,
                  do: %ExCubecl.Buffer{ref: ref, shape: Tuple.to_list(shape), dtype: Nx.Type.to_string(type) |> String.to_atom(), device: dev}

    [out] = ExCubecl.run_kernel!(name, buffers, opts)
    {:ok, type} = BT.burn_type_of_dtype(out.dtype)
    %BT{ref: out.ref, shape: out.shape, type: type}
  end

  defp shape!(shape) when is_list(shape), do: List.to_tuple(shape)
  defp shape!(shape) when is_tuple(shape), do: shape
  defp shape!(other), do: raise(ArgumentError, "a shape is a list of dimensions, got #{inspect(other)}")

  defp nx_type!(type) when type in [:f32, :f64, :i32, :i64], do: BT.burn_type_to_nx(type)
  defp nx_type!(other), do: raise(ArgumentError, "unknown Burn type #{inspect(other)} (:f32, :f64, :i32, :i64)")

  defp backend(opts), do: {ExBurn.Backend, device: device_opt(opts)}

  defp device_opt(opts) do
    case Keyword.get(opts, :device) do
      nil -> ExBurn.default_device_spec()
      dev -> ExBurn.device_spec(dev)
    end
  end
end
