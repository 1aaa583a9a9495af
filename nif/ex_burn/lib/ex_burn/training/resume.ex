if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Resume do
    @moduledoc """
    Exact resume of `ExBurn.Training.fit/3`: `fit(model, data, resume: path)` continues the
    run that wrote the checkpoint at `path` (a file of `ExBurn.Training.CheckpointCallback`,
    or its folder: the file of the latest epoch there) as if it had never stopped. With the
    same data and options as the first run (`:epochs` is the run's total), a run stopped
    after epoch `k` and resumed ends bit for bit where the uninterrupted run ends.

    A checkpoint of `fit/3` holds, beside the parameters and the layers' state (which
    includes the random keys of dropout layers):

      * the optimizer state (moments, step counts, the learning-rate multiplier, gradient
        accumulation), in the file's `:training` section (`ExBurn.Model.File`), and the
        optimizer spec and trainable parameters it belongs to;
      * the number of optimizer steps taken (step-counted schedules continue from it);
      * the epochs done (epoch-counted schedules, `:lr_schedule` and `:warmup`, continue from
        the next one; the shuffling of `{x, y}` data takes the next epoch's order, so the
        data order is the uninterrupted run's), the loop's running loss and step counter;
      * the learning-rate factor set by callbacks (`:learning_rate` in the metrics map) as it
        stands when the checkpoint callback runs, and the history of the epochs done
        (`fit_with_progress/3` gives the whole run's).

    Not in a checkpoint: the state that callbacks keep across epochs
    (`EarlyStoppingCallback`, `ReduceLROnPlateauCallback` start afresh at resume), a
    learning-rate change made by a callback listed after the checkpoint callback, and the
    position in data other than `{x, y}` tensors (a stream or a list of batches is used from
    its start). A checkpoint is written atomically (`ExBurn.AtomicFile`): a run killed while
    it saves leaves the previous epoch's file or this one's, whole.

    `ExBurn.Model.save/2` writes no training state (a model to serve or to fine-tune needs
    none); `ExBurn.Model.load/2` reads a checkpoint's parameters as those of any model file.
    """

    alias ExBurn.Model
    alias ExBurn.Model.{Params, Store}
    alias Nx.Defn.Composite

    @typedoc """
    The run's state at the end of an epoch: the epochs done, the epoch's learning rate, the
    factor callbacks set for the next ones, the history, and the loop's step state (`i`, `loss`).
    """
    @type run :: %{
            epoch: non_neg_integer(),
            lr: float(),
            factor: float(),
            history: [map()],
            step: %{i: Nx.Tensor.t(), loss: Nx.Tensor.t()} | nil
          }

    ## Writing

    @doc """
    `model` with `run` kept in its optimizer state (`fit/3` puts it in the metrics map's
    model at the end of each epoch, for the checkpoint callback).
    """
    @spec put_run(Model.t(), run()) :: Model.t()
    def put_run(%Model{optimizer_state: %{} = opt} = model, run),
      do: %{model | optimizer_state: Map.put(opt, :run, run)}

    @doc """
    The learning-rate factor of the epochs after one trained at `lr` with factor `factor`,
    once the callbacks gave `metrics` (a different `:learning_rate` there scales it).
    """
    @spec next_factor(float(), float(), map()) :: float()
    def next_factor(factor, lr, metrics) do
      case metrics do
        %{learning_rate: new} when is_number(new) and new != lr and lr > 0 -> factor * new / lr
        _ -> factor
      end
    end

    @doc """
    Saves the metrics map's `:model` as a checkpoint at `path` (atomically): the parameters,
    the optimizer state, and the run's state with the factor the callbacks before this one
    set. `:ok` or `{:error, reason}`.
    """
    @spec save_checkpoint(map(), Path.t()) :: :ok | {:error, String.t()}
    def save_checkpoint(%{model: %Model{optimizer_state: %{run: run} = opt} = model} = metrics, path) do
      run = %{run | factor: next_factor(run.factor, run.lr, metrics)}
      Store.save_checkpoint(%{model | optimizer_state: %{opt | run: run}}, path)
    end

    def save_checkpoint(%{model: %Model{} = model}, path), do: Store.save_checkpoint(model, path)

    @doc """
    The training state of `model` for a checkpoint file: `{tensors, meta}` (the tensors of the
    optimizer state and of the loop's step state, named `"0"`, `"1"`, ...; `meta` the
    structure holding their names, the optimizer key, the step count and the run), or `nil`
    for a model that has not been trained.
    """
    @spec pack(Model.t()) :: {%{String.t() => Nx.Tensor.t()}, map()} | nil
    def pack(%Model{optimizer_state: %{key: key, state: state, updates: updates} = opt}) do
      run = Map.get(opt, :run)
      container = if run && run.step, do: {state, run.step}, else: {state}

      {skeleton, {tensors, _}} =
        Composite.traverse(container, {%{}, 0}, fn t, {acc, i} ->
          {i, {Map.put(acc, Integer.to_string(i), Nx.to_tensor(t)), i + 1}}
        end)

      {tensors, %{key: key, updates: updates, skeleton: skeleton, run: run && Map.delete(run, :step)}}
    end

    def pack(%Model{}), do: nil

    ## Reading

    @doc """
    `model` (compiled as the run's was) with the parameters and the optimizer state of the
    checkpoint at `path` (a file, or a folder of `epoch_<n>.exburn` files: the latest), and
    the run's state; `{model, nil}` without `path`. Raises `ExBurn.Error` (op `fun`) when the
    file can't be read or is damaged, `ArgumentError` when it holds no training state.
    """
    @spec restore(Model.t(), Path.t() | nil, String.t()) :: {Model.t(), run() | nil}
    def restore(model, nil, _fun), do: {model, nil}

    def restore(%Model{} = model, path, fun) when is_binary(path) do
      file = checkpoint_file!(path, fun)

      case Store.read_checkpoint(model, file, fun) do
        {:ok, _model, nil} ->
          raise ArgumentError,
                "#{fun}: #{file} holds no training state to resume from (ExBurn.Model.save/2 writes the parameters only; the checkpoint callback, ExBurn.Training.CheckpointCallback, writes the optimizer state too)"

        {:ok, loaded, {training, tensors}} ->
          unpack!(loaded, training, tensors, file, fun)

        {:error, %ExBurn.Error{} = e} ->
          raise e
      end
    end

    def restore(_model, path, fun),
      do: raise(ArgumentError, "#{fun}: :resume must be a path (a checkpoint file or its folder), got #{inspect(path)}")

    @doc "The file to resume from: `path` itself, or the latest `epoch_<n>.exburn` in the folder `path`."
    @spec checkpoint_file!(Path.t(), String.t()) :: Path.t()
    def checkpoint_file!(path, fun) do
      if File.dir?(path) do
        files =
          for name <- File.ls!(path),
              [_, n] <- [Regex.run(~r/^epoch_(\d+)\.exburn$/, name)],
              do: {String.to_integer(n), Path.join(path, name)}

        case Enum.max_by(files, &elem(&1, 0), fn -> nil end) do
          {_n, file} -> file
          nil -> raise ArgumentError, "#{fun}: no checkpoint (epoch_<n>.exburn) in the folder #{path}"
        end
      else
        path
      end
    end

    defp unpack!(model, training, tensors, file, fun) do
      damaged = fn what ->
        raise ExBurn.Error.new(fun, "the checkpoint's training state is damaged", "#{file}: #{what}")
      end

      case training do
        %{key: key, updates: updates, skeleton: skeleton, run: run} when is_integer(updates) and updates >= 0 ->
          backend = Model.backend(model)

          leaf = fn
            i when is_integer(i) ->
              case Map.fetch(tensors, Integer.to_string(i)) do
                {:ok, t} -> Params.on_backend(t, backend)
                :error -> damaged.("tensor #{i} is missing")
              end

            other ->
              damaged.("unexpected #{inspect(other, limit: 3)}")
          end

          {state, step} =
            case traverse(skeleton, leaf, damaged) do
              {state} -> {state, nil}
              {state, %{i: _, loss: _} = step} -> {state, step}
              other -> damaged.("unexpected structure #{inspect(other, limit: 3)}")
            end

          run = run(run, step, damaged)
          {%{model | optimizer_state: %{key: key, state: state, updates: updates}}, run}

        other ->
          damaged.("unexpected #{inspect(other, limit: 3)}")
      end
    end

    defp traverse(skeleton, leaf, damaged) do
      Composite.traverse(skeleton, leaf)
    rescue
      e in Protocol.UndefinedError -> damaged.("unexpected #{inspect(e.value, limit: 3)}")
    end

    defp run(nil, _step, _damaged), do: %{epoch: 0, lr: nil, factor: 1.0, history: [], step: nil}

    defp run(%{epoch: e, factor: f, history: h} = run, step, _damaged)
         when is_integer(e) and e >= 0 and is_number(f) and is_list(h),
         do: Map.put(run, :step, step)

    defp run(other, _step, damaged), do: damaged.("unexpected run #{inspect(other, limit: 3)}")
  end
end
