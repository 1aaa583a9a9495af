defmodule ExCubecl.Helpers do
  @moduledoc false
  # What every family of `ExCubecl` shares: buffers from the NIF's references, the checks of
  # arguments, and results as `{:ok, value}` or `{:error, %ExCubecl.Error{}}`.
  alias ExCubecl.{Buffer, Error}

  @dtypes [:f32, :f16, :bf16, :f64, :s8, :s16, :s32, :s64, :u8, :u16, :u32, :u64, :bool]

  # ---------------------------------------------------------------------------------------
  # Buffers from references

  def wrap(ref) do
    case Buffer.wrap(ref) do
      %Buffer{} = b -> {:ok, b}
      error -> error(error)
    end
  end

  def wrap_all(refs), do: map_ok(refs, &wrap/1)

  # `fun` over `list` while it gives `{:ok, value}`: the values, or the first error.
  def map_ok(list, fun) do
    Enum.reduce_while(list, {:ok, []}, fn x, {:ok, acc} ->
      case fun.(x) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, values} -> {:ok, Enum.reverse(values)}
      error -> error
    end
  end

  def refs(op, inputs) when is_list(inputs) do
    map_ok(inputs, fn
      %Buffer{ref: ref} when is_reference(ref) -> {:ok, ref}
      other -> {:error, Error.new(op, "inputs must be ExCubecl buffers", inspect(other, limit: 5))}
    end)
  end

  def refs(op, other), do: {:error, Error.new(op, "inputs must be a list of buffers", inspect(other, limit: 5))}

  def with_ref(_op, %Buffer{ref: ref}, fun) when is_reference(ref) do
    case fun.(ref) do
      {:ok, value} -> {:ok, value}
      error -> error(error)
    end
  end

  def with_ref(op, other, _fun), do: not_a_buffer(op, other)

  def not_a_buffer(op, other), do: {:error, Error.new(op, "expects an ExCubecl buffer", inspect(other, limit: 5))}

  # ---------------------------------------------------------------------------------------
  # Checks

  def check_dtype(_op, dtype) when dtype in @dtypes, do: :ok

  def check_dtype(op, dtype),
    do: {:error, Error.new(op, "unknown dtype #{inspect(dtype)}", "dtypes: #{Enum.map_join(@dtypes, ", ", &inspect/1)}")}

  def check_shape(op, shape) do
    if is_list(shape) and Enum.all?(shape, &(is_integer(&1) and &1 >= 0 and &1 < 4_611_686_018_427_387_904)) do
      :ok
    else
      {:error, Error.new(op, "a shape is a list of non-negative integers", inspect(shape, limit: 10))}
    end
  end

  def check_name(_op, name) when is_atom(name) or is_binary(name), do: :ok
  def check_name(op, name), do: {:error, Error.new(op, "a kernel name is an atom or a string", inspect(name))}

  def check_opts(op, opts) do
    if Keyword.keyword?(opts), do: :ok, else: {:error, Error.new(op, "options must be a keyword list", inspect(opts, limit: 5))}
  end

  def device_opt(op, opts) do
    case Keyword.get(opts, :device) do
      nil -> {:ok, ExCubecl.Devices.default_device()}
      d when is_binary(d) -> {:ok, d}
      d when is_atom(d) -> {:ok, Atom.to_string(d)}
      {runtime, index} when is_atom(runtime) and is_integer(index) -> {:ok, "#{runtime}:#{index}"}
      other -> {:error, Error.new(op, "a device is a string such as \"cuda:0\" or \"wgpu\"", inspect(other))}
    end
  end

  # ---------------------------------------------------------------------------------------
  # Results

  # Terms the NIF cannot decode raise ArgumentError there: an error here.
  def safe(fun, op) do
    fun.()
  rescue
    ArgumentError -> {:error, Error.new(op, "slots are {:input, i} or {:step, s, k}; options a keyword list", "")}
  end

  def ok_or_error({:ok, v}), do: {:ok, v}
  def ok_or_error(other), do: error(other)

  def error({:error, %Error{} = e}), do: {:error, e}
  def error({:error, %{op: _, reason: _, details: _} = e}), do: {:error, Error.from(e)}
  def error({:error, other}), do: {:error, Error.new("ex_cubecl", inspect(other), "")}
  def error(other), do: {:error, Error.new("ex_cubecl", "unexpected result #{inspect(other, limit: 5)}", "")}

  def bang({:ok, value}), do: value
  def bang({:error, %Error{} = e}), do: raise(e)
  def bang(other), do: other |> error() |> bang()
end
