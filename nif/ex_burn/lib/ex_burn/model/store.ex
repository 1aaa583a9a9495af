if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Store do
    @moduledoc false
    # ExBurn.Model.save/2 and load/2 (load(model, path)): a model's parameters and metadata in the
    # format of ExBurn.Model.File, written atomically (ExBurn.AtomicFile), and read back into the
    # Axon graph the file was saved from or into a compiled model, checked name by name.

    alias ExBurn.Model

    def save(%Model{} = model, path) do
      case write(model, path, %{}, meta(model)) do
        :ok -> :ok
        {:error, reason} -> {:error, "ExBurn.Model.save: #{reason}"}
      end
    end

    @doc false
    # A training checkpoint: the model file with the training state of ExBurn.Training.Resume
    # (the optimizer state in the file's :training section, the rest in meta.training).
    # Readers of model files read it as one. :ok or {:error, reason}.
    def save_checkpoint(%Model{} = model, path) do
      case ExBurn.Training.Resume.pack(model) do
        nil -> write(model, path, %{}, meta(model))
        {tensors, training} -> write(model, path, %{training: tensors}, Map.put(meta(model), :training, training))
      end
    end

    defp write(model, path, sections, meta) do
      binary = ExBurn.Model.File.encode(Model.parameters(model), meta, :model, sections)

      case ExBurn.AtomicFile.write(path, binary) do
        :ok -> :ok
        {:error, reason} -> {:error, "cannot write #{path} (#{reason})"}
      end
    end

    @doc false
    # A checkpoint read into the compiled `model`: {:ok, model with the file's parameters,
    # {meta.training, the :training section's tensors} or nil where the file has none}, or
    # {:error, %ExBurn.Error{}} (op `fun`).
    def read_checkpoint(%Model{} = target, path, fun) do
      with {:ok, binary} <- read(path, fun),
           {:ok, {params, meta, sections}} <- ExBurn.Model.File.decode_sections(binary, :model, fun),
           {:ok, model} <- into(target, params, meta, fun) do
        case {meta[:training], sections[:training]} do
          {nil, _} -> {:ok, model, nil}
          {training, tensors} -> {:ok, model, {training, tensors || %{}}}
        end
      end
    end

    defp meta(model) do
      %{
        exburn: ExBurn.version(),
        loss: if(is_atom(model.loss_fn), do: model.loss_fn),
        loss_opts: model.loss_opts,
        optimizer: model.optimizer,
        optimizer_opts: model.optimizer_opts,
        input: input_meta(model.input),
        frozen: Enum.sort(model.frozen_layers),
        precision: model.precision,
        seed: model.seed
      }
    end

    defp input_meta(%Nx.Tensor{shape: shape, type: type}), do: {shape, type}
    defp input_meta(%{} = inputs), do: Map.new(inputs, fn {k, v} -> {k, input_meta(v)} end)

    defp input_template({shape, type}), do: Nx.template(shape, type)
    defp input_template(%{} = inputs), do: Map.new(inputs, fn {k, v} -> {k, input_template(v)} end)

    def load(target, path) do
      fun = "ExBurn.Model.load"

      with {:ok, binary} <- read(path, fun),
           {:ok, {params, meta}} <- ExBurn.Model.File.decode(binary, :model, fun),
           {:ok, model} <- into(target, params, meta, fun) do
        {:ok, model}
      else
        {:error, %ExBurn.Error{} = e} -> {:error, Exception.message(e)}
      end
    end

    @doc false
    # The parameters of a model file (for ExBurn.Model.import_params/3).
    def read_params(path, fun) do
      with {:ok, binary} <- read(path, fun),
           {:ok, {params, _meta}} <- ExBurn.Model.File.decode(binary, :model, fun),
           do: {:ok, params}
    end

    defp read(path, fun) do
      case File.read(path) do
        {:ok, binary} -> {:ok, binary}
        {:error, reason} -> {:error, ExBurn.Error.new(fun, "cannot read #{path}", :file.format_error(reason))}
      end
    end

    defp into(target, params, meta, fun) do
      model = target_model(target, meta)
      names = model |> Model.parameters() |> Map.keys() |> Enum.sort()

      case {names -- Map.keys(params), Map.keys(params) -- names} do
        {[], []} ->
          {:ok, Model.update_params(model, params)}

        {missing, extra} ->
          {:error,
           ExBurn.Error.new(
             fun,
             "the file's parameters don't match the model's",
             "missing: #{inspect(missing)}, unknown: #{inspect(extra)}"
           )}
      end
    rescue
      # A file of the right format whose contents don't fit: no model comes out of it.
      e -> {:error, ExBurn.Error.new(fun, Exception.message(e))}
    end

    defp target_model(%Model{} = model, _meta), do: model

    defp target_model(%Axon{} = axon, meta) do
      opts =
        [optimizer: {meta.optimizer, meta.optimizer_opts}, input: input_template(meta.input), seed: meta.seed] ++
          if(meta.loss, do: [loss: meta.loss, loss_opts: meta.loss_opts], else: [])

      model = Model.compile(axon, opts)
      model = if meta.precision, do: Model.quantize(model, meta.precision), else: model
      if meta.frozen == [], do: model, else: Model.freeze(model, meta.frozen)
    end

    defp target_model(other, _meta),
      do: raise(ArgumentError, "expected an %Axon{} graph or an %ExBurn.Model{}, got #{inspect(other, limit: 5)}")
  end
end
