defmodule ExBurn.NifHelper do
  @moduledoc """
  The tensor operations of `ExBurn.BurnBridge` as `{:ok, result}` / `{:error, reason}`
  tuples, under the names of the seed's NIF functions (`add_tensor/2`, `matmul_tensor/2`,
  ...). Each is one call of the project's one op table (there are no per-op NIF stubs):
  operands are `%ExBurn.Tensor{}`s or bare tensor references, results `%ExBurn.Tensor{}`s;
  a failure is `{:error, message}`, the message starting with the operation.

      iex> {:ok, a} = ExBurn.NifHelper.ones_tensor([2, 2], :f32)
      iex> {:ok, b} = ExBurn.NifHelper.add_tensor(a, a)
      iex> {:ok, [2, 2]} = ExBurn.NifHelper.tensor_shape(b)
      iex> {:error, "ExBurn.BurnBridge.matmul: " <> _} = ExBurn.NifHelper.matmul_tensor(b, ExBurn.BurnBridge.ones([3, 1]))
  """

  alias ExBurn.BurnBridge, as: B
  alias ExBurn.Tensor, as: BT

  @type result(t) :: {:ok, t} | {:error, String.t()}

  # {helper name, BurnBridge function, argument names}
  @ops [
    {:abs_tensor, :abs, [:a]},
    {:add_tensor, :add, [:a, :b]},
    {:broadcast_tensor, :broadcast, [:a, :shape]},
    {:concat_tensor, :concat, [:a, :b]},
    {:conv2d_tensor, :conv2d, [:input_ref, :kernel_ref, :stride, :padding]},
    {:div_tensor, :div, [:a, :b]},
    {:dot_tensor, :dot, [:a, :b]},
    {:exp_tensor, :exp, [:a]},
    {:eye_tensor, :eye, [:size, :type]},
    {:iota_tensor, :iota, [:shape, :axis, :type]},
    {:layer_norm_tensor, :layer_norm, [:a, :dim, :eps]},
    {:log_tensor, :log, [:a]},
    {:matmul_tensor, :matmul, [:a, :b]},
    {:max_tensor, :max, [:a]},
    {:max_tensor, :max, [:a, :axes]},
    {:mean_tensor, :mean, [:a]},
    {:mean_tensor, :mean, [:a, :axes]},
    {:min_tensor, :min, [:a]},
    {:min_tensor, :min, [:a, :axes]},
    {:mul_tensor, :mul, [:a, :b]},
    {:neg_tensor, :neg, [:a]},
    {:ones_tensor, :ones, [:shape, :type]},
    {:pow_tensor, :pow, [:a, :exp]},
    {:random_tensor, :random, [:shape, :type, :low, :high]},
    {:relu_tensor, :relu, [:a]},
    {:reshape_tensor, :reshape, [:a, :shape]},
    {:sigmoid_tensor, :sigmoid, [:a]},
    {:slice_tensor, :slice, [:ref, :ranges]},
    {:softmax_tensor, :softmax, [:a, :dim]},
    {:sqrt_tensor, :sqrt, [:a]},
    {:sub_tensor, :sub, [:a, :b]},
    {:sum_tensor, :sum, [:a]},
    {:sum_tensor, :sum, [:a, :axes]},
    {:tanh_tensor, :tanh, [:a]},
    {:to_cpu, :to_cpu, [:tensor]},
    {:to_gpu, :to_gpu, [:tensor]},
    {:transpose_tensor, :transpose, [:a]},
    {:transpose_tensor, :transpose, [:a, :dim0, :dim1]},
    {:zeros_tensor, :zeros, [:shape, :type]}
  ]

  for {name, fun, args} <- @ops do
    vars = Enum.map(args, &Macro.var(&1, __MODULE__))
    @doc "`ExBurn.BurnBridge.#{fun}/#{length(args)}` as `{:ok, tensor}` or `{:error, reason}`."
    @spec unquote(name)(unquote_splicing(Enum.map(args, fn _ -> quote(do: term()) end))) :: result(BT.t())
    def unquote(name)(unquote_splicing(vars)), do: wrap(fn -> B.unquote(fun)(unquote_splicing(vars)) end)
  end

  @doc """
  Creates a tensor from raw native-endian binary `data`, a `shape` list and a Burn `type`.

      iex> {:ok, t} = ExBurn.NifHelper.new_tensor(<<1.5::float-32-native>>, [1], :f32)
      iex> ExBurn.NifHelper.tensor_to_binary(t)
      {:ok, <<1.5::float-32-native>>}
  """
  @spec new_tensor(binary(), [non_neg_integer()], BT.burn_type()) :: result(BT.t())
  def new_tensor(data, shape, type), do: BT.from_binary(data, shape, type)

  @doc "The shape of a tensor (or a tensor reference): `{:ok, [dims]}`."
  @spec tensor_shape(BT.t() | reference()) :: result([non_neg_integer()])
  def tensor_shape(ref), do: wrap(fn -> B.shape(ref) end)

  @doc "The raw bytes of a tensor: `{:ok, binary}`."
  @spec tensor_to_binary(BT.t() | reference()) :: result(binary())
  def tensor_to_binary(ref), do: wrap(fn -> B.to_binary(ref) end)

  @doc """
  Frees a tensor's device memory now: `{:ok, true}` when it was freed now, `{:ok, false}`
  when it had been freed before.
  """
  @spec free_tensor(BT.t() | reference()) :: result(boolean())
  def free_tensor(%BT{ref: ref}), do: free_tensor(ref)

  def free_tensor(ref) when is_reference(ref) do
    case ExCubecl.Native.free(ref) do
      {:ok, freed} -> {:ok, freed}
      {:error, e} -> {:error, "free_tensor: #{e.reason}"}
    end
  end

  def free_tensor(other), do: {:error, "free_tensor: expects a tensor, got #{inspect(other, limit: 5)}"}

  @doc "Whether a hardware GPU is available: `{:ok, boolean}`."
  @spec gpu_available() :: result(boolean())
  def gpu_available, do: wrap(fn -> ExBurn.gpu_available?() end)

  @doc "The active device's name: `{:ok, name}`."
  @spec device_name() :: result(String.t())
  def device_name, do: wrap(fn -> ExBurn.device_name() end)

  defp wrap(fun) do
    {:ok, fun.()}
  rescue
    e in ExBurn.Error -> {:error, Exception.message(e)}
    e -> {:error, Exception.message(e)}
  end
end
