defmodule ExBurn.Record do
  @moduledoc """
  Burn's record files, read and written from Elixir: the files that Burn's
  `NamedMpkFileRecorder<FullPrecisionSettings>` writes (`Module::save_file`) and loads
  (`Module::load_file`), so that one set of weights serves the Rust job and the Elixir one.

      {:ok, params} = ExBurn.Record.load("digits_mlp.mpk")
      params["hidden1.weight"]   #=> f32[64][128] on ExBurn.Backend

      :ok = ExBurn.Record.save("digits_mlp.mpk", params)
      # in Rust: Mlp::init(&dev).load_file("digits_mlp.mpk", &NamedMpkFileRecorder::<FullPrecisionSettings>::new(), &dev)

  Parameters are named by their module path in the Rust model, dot-separated
  (`"hidden1.weight"`, `"conv1.bias"`; an element of a `Vec` of modules by its index,
  `"layers.0.weight"`). Loading gives every parameter of the record with its recorded type
  (`f32`, `f64`, `f16`, `bf16`, signed and unsigned integers; Burn's bool tensors as `u8`),
  on `ExBurn.Backend`. `ExBurn.Record.Axon` maps them to and from an `Axon.ModelState`.

  Saving writes the layout Burn's recorder writes for a module with these parameters: Burn's
  metadata strings, a fresh parameter id each, the values in their own type (Burn converts
  them to the module's float or int type on load). Fields of the Rust module that hold no
  parameter (a `Relu`, a `MaxPool2d`, a `Conv2d`'s stride and padding) are left out: Burn's
  loader reads them as absent and keeps the module's own. The file is written to a temporary
  file beside `path` and renamed over it, so a failed save leaves no half-written file. The
  path is used as it is (Burn's `save_file` and `load_file` set the extension `.mpk`: name
  the file so).

  Failures (a missing, truncated or foreign file, an unsupported type, a type the device
  can't hold) give `{:error, %ExBurn.Error{}}` naming the file and what is wrong; the bang
  forms raise it.
  """
  alias ExCubecl.Native

  @typedoc "Parameters by dotted module path."
  @type params :: %{String.t() => Nx.Tensor.t()}

  @doc """
  The parameters of the record at `path`, on `ExBurn.Backend` (options: `:device`).
  """
  @spec load(Path.t(), keyword()) :: {:ok, params()} | {:error, ExBurn.Error.t()}
  def load(path, opts \\ []) do
    with {:ok, %{params: params}} <- read(path, opts), do: {:ok, Map.new(params)}
  end

  @doc "`load/2`, raising `ExBurn.Error`."
  @spec load!(Path.t(), keyword()) :: params()
  def load!(path, opts \\ []), do: bang(load(path, opts))

  @doc """
  The record at `path`: its parameters in the file's order (the Rust module's field order)
  and its metadata (`:float`, `:int`, `:format`, `:version`, `:settings`: the strings Burn
  wrote). Options: `:device`.
  """
  @spec read(Path.t(), keyword()) ::
          {:ok, %{metadata: %{atom() => String.t()}, params: [{String.t(), Nx.Tensor.t()}]}}
          | {:error, ExBurn.Error.t()}
  def read(path, opts \\ []) do
    opts = Keyword.validate!(opts, [:device])
    device = device(opts)

    case Native.record_load(to_string(path), device) do
      {:ok, {metadata, params}} ->
        params = for {name, ref, shape, dtype} <- params, do: {name, tensor(ref, shape, dtype, device)}
        {:ok, %{metadata: Map.new(metadata, fn {k, v} -> {String.to_atom(k), v} end), params: params}}

      {:error, e} ->
        {:error, ExBurn.Error.from("ExBurn.Record.load", e)}
    end
  end

  @doc """
  Writes `params` (a map or a list of `{name, tensor}`, tensors of any backend) to `path` as
  Burn's recorder does. Options: `:metadata`, a map overriding some of Burn's metadata
  strings (`:float`, `:int`, `:format`, `:version`, `:settings`), e.g. the metadata
  `read/2` gave.

      iex> path = Path.join(System.tmp_dir!(), "ex_burn_record_doc.mpk")
      iex> ExBurn.Record.save(path, %{"linear.weight" => Nx.tensor([[1.0, 2.0]]), "linear.bias" => Nx.tensor([0.5])})
      :ok
      iex> {:ok, params} = ExBurn.Record.load(path)
      iex> params |> Map.new(fn {name, t} -> {name, Nx.to_list(t)} end)
      %{"linear.bias" => [0.5], "linear.weight" => [[1.0, 2.0]]}
      iex> File.rm!(path)
      :ok
  """
  @spec save(Path.t(), params() | [{String.t(), Nx.Tensor.t()}], keyword()) :: :ok | {:error, ExBurn.Error.t()}
  def save(path, params, opts \\ []) when is_map(params) or is_list(params) do
    opts = Keyword.validate!(opts, [:metadata])
    metadata = if m = opts[:metadata], do: Map.new(m, fn {k, v} -> {to_string(k), to_string(v)} end)

    with {:ok, entries} <- entries(params),
         {:ok, _path} <- Native.record_save(to_string(path), metadata, entries) do
      :ok
    else
      {:error, %ExBurn.Error{} = e} -> {:error, e}
      {:error, e} -> {:error, ExBurn.Error.from("ExBurn.Record.save", e)}
    end
  end

  @doc "`save/3`, raising `ExBurn.Error`."
  @spec save!(Path.t(), params() | [{String.t(), Nx.Tensor.t()}], keyword()) :: :ok
  def save!(path, params, opts \\ []), do: bang(save(path, params, opts))

  # {name, ref} of each param, on the device; complex tensors have no Burn counterpart.
  defp entries(params) do
    Enum.reduce_while(params, {:ok, []}, fn {name, t}, {:ok, acc} ->
      case t do
        %Nx.Tensor{type: {:c, _}} ->
          {:halt,
           {:error,
            ExBurn.Error.new(
              "ExBurn.Record.save",
              "parameter #{inspect(name)} is complex: a Burn record holds real tensors",
              ExBurn.Backend.type_name(t.type)
            )}}

        %Nx.Tensor{} ->
          {:cont, {:ok, [{to_string(name), ref(t)} | acc]}}

        other ->
          {:halt,
           {:error,
            ExBurn.Error.new("ExBurn.Record.save", "parameter #{inspect(name)} is not a tensor", inspect(other))}}
      end
    end)
    |> case do
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      error -> error
    end
  end

  defp ref(%Nx.Tensor{data: %ExBurn.Backend{ref: ref}}), do: ref
  defp ref(%Nx.Tensor{} = t), do: Nx.backend_copy(t, ExBurn.Backend).data.ref

  defp tensor(ref, shape, dtype, device) do
    type = Nx.Type.normalize!(String.to_existing_atom(dtype))
    shape = List.to_tuple(shape)

    %Nx.Tensor{
      data: %ExBurn.Backend{ref: ref, device: device},
      type: type,
      shape: shape,
      names: List.duplicate(nil, tuple_size(shape))
    }
  end

  defp device(opts) do
    case opts[:device] do
      nil -> ExBurn.default_device_spec()
      dev -> ExBurn.device_spec(dev)
    end
  end

  defp bang(:ok), do: :ok
  defp bang({:ok, value}), do: value
  defp bang({:error, e}), do: raise(e)
end
