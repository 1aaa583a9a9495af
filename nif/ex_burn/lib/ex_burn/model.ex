if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model do
    @moduledoc """
    An Axon model with its parameters on an ExBurn device, its loss and its optimizer: what
    `ExBurn.Training` trains, and what runs inference in one compiled call.

        model =
          Axon.input("x", shape: {nil, 784})
          |> Axon.dense(128, activation: :relu)
          |> Axon.dense(10, activation: :softmax)
          |> ExBurn.Model.compile(loss: :cross_entropy, optimizer: :adam, learning_rate: 1.0e-3, seed: 42)

        ExBurn.Model.predict(model, images)          # one ExBurn.Defn.Compiler call per batch
        IO.puts(ExBurn.Model.summary(model))
        {model, history} = ExBurn.Training.fit(model, {x, y}, epochs: 5, batch_size: 32)
        :ok = ExBurn.Model.save(model, "digits.exburn")
        {:ok, model} = ExBurn.Model.load("digits.exburn", axon_graph)

    The struct holds the Axon graph (`model`), its `Axon.ModelState` (`state`: parameters
    and layer state, on `device`), the loss (`loss`, `loss_opts`), the optimizer (`optimizer`,
    a name of `ExBurn.Training.Optimizer`, with `optimizer_opts`), the frozen layers
    (`frozen`, also marked in `state` with `Axon.ModelState.freeze/2`), the input templates
    (`input`) and output template (`output`), the seed of the initialisation, the `precision`
    set by `quantize/2`, and the optimizer state of the last training run (`optimizer_state`,
    so that `ExBurn.Training.fit/3` and `train_step/3` continue where they stopped).

    Parameters are named `"layer.param"` (`parameters/1`), the form `update_params/2`
    takes: a map of such names from anywhere (another model, a Burn record) loads into the
    model, checked name by name and shape by shape.

    ## File format

    `save/2` writes, and `load/2` reads, the format of `ExBurn.Model.File` (version
    #{ExBurn.Model.File.version()}): the 8-byte magic `"EXBURNMD"`, a 2-byte format version, a
    2-byte kind (1: model, 2: parameters only, as `serialize_params/1` writes), the CRC-32 of
    the payload and its length; then the payload: an index (each parameter's name, type,
    shape, offset and size, and the model's metadata: loss, optimizer and options, input
    templates, frozen layers, precision, seed) and the tensors' bytes. The Axon graph itself
    is code, not data: `load/2` takes it (or a compiled model) and puts the file's
    parameters in. A file that is truncated, corrupted (checksum), of another version or
    kind, or not an ExBurn file at all gives `{:error, %ExBurn.Error{}}`, and so does one
    whose parameters don't match the model's names and shapes; nothing is half-loaded.

    ## Errors

    Bad arguments raise `ArgumentError` whose message starts with the function
    (`"ExBurn.Model.compile: unknown loss :foo ..."`); device and file failures give
    `ExBurn.Error`.
    """

    alias Axon.ModelState
    alias Nx.Defn.Composite
    alias ExBurn.Model.{Benchmark, Params, Spec, Store, Summary}
    alias ExBurn.Training.Optimizer

    @compiler ExBurn.Defn.Compiler

    defstruct [
      :model,
      :state,
      :loss,
      :optimizer,
      :device,
      :input,
      :output,
      :seed,
      :predict_fn,
      loss_opts: [],
      optimizer_opts: [],
      frozen: [],
      precision: nil,
      optimizer_state: nil
    ]

    @type t :: %__MODULE__{}

    @compile_opts [:loss, :loss_opts, :optimizer, :learning_rate, :weight_decay, :input, :input_type, :seed, :device]

    ## Building

    @doc """
    Compiles an Axon graph into a model: checks the options and initialises the parameters
    with Axon's initialisers (one compiled call on the device).

    ## Options

      * `:loss` - `:cross_entropy` (categorical, one-hot targets), `:mse`,
        `:binary_cross_entropy`, or a function `(y_true, y_pred) -> scalar`. Needed to train,
        not to predict.
      * `:loss_opts` - `from_logits: true` (cross-entropies), `sparse: true` (cross-entropy
        with integer class targets).
      * `:optimizer` - `:sgd`, `:adam` (default), `:adamw`, `:rmsprop`, or `{name, opts}` with
        the optimizer's options (`ExBurn.Training.Optimizer`: `momentum`, `nesterov`, `b1`, ...).
      * `:learning_rate`, `:weight_decay` - the optimizer's.
      * `:input` - the input: a shape (`{nil, 784}`; `nil` is the batch axis), a tensor or
        template, or a map of input name to either. Default: the shapes the model's
        `Axon.input/2` layers declare.
      * `:input_type` - the type of inputs given by shape (default `{:f, 32}`).
      * `:seed` - the seed of the initialisation (default: a new one, kept in `:seed`).
      * `:device` - a device of `ExCubecl.devices/0` (default `ExBurn.default_device/0`).
    """
    @spec compile(Axon.t(), keyword()) :: t()
    def compile(axon, opts \\ [])

    def compile(%Axon{} = axon, opts) do
      fun = "ExBurn.Model.compile"
      opts = options!(opts, @compile_opts, fun)
      {loss, loss_opts} = loss!(opts[:loss], opts[:loss_opts] || [], fun)
      spec = Optimizer.validate!(opts[:optimizer] || :adam, Keyword.take(opts, [:learning_rate, :weight_decay]), fun)
      device = device!(opts[:device], fun)
      input = Spec.input!(axon, opts[:input], Nx.Type.normalize!(opts[:input_type] || {:f, 32}), fun)
      seed = seed!(opts[:seed], fun)

      %__MODULE__{
        model: axon,
        loss: loss,
        loss_opts: loss_opts,
        optimizer: spec.name,
        optimizer_opts: spec.opts ++ spec.training,
        device: device,
        input: input,
        seed: seed
      }
      |> with_graph(axon)
      |> then(&%{&1 | state: init_state(&1)})
    end

    def compile(other, _opts),
      do: raise(ArgumentError, "ExBurn.Model.compile: expected an %Axon{} model, got #{inspect(other, limit: 5)}")

    defp loss!(nil, [], _fun), do: {nil, []}
    defp loss!(loss, loss_opts, fun), do: Spec.loss!(loss, loss_opts, fun)

    defp seed!(nil, _fun), do: :erlang.unique_integer([:positive])
    defp seed!(seed, _fun) when is_integer(seed) and seed >= 0, do: seed

    defp seed!(seed, fun),
      do: raise(ArgumentError, "#{fun}: :seed must be a non-negative integer, got #{inspect(seed)}")

    # The graph and what is derived from it: the inference function, the output template.
    defp with_graph(model, axon) do
      {_init, predict} = Axon.build(axon, mode: :inference, seed: model.seed)
      %{model | model: axon, predict_fn: predict, output: Axon.get_output_shape(axon, model.input)}
    end

    defp init_state(%__MODULE__{model: axon, input: input, seed: seed} = model) do
      {init, _predict} = Axon.build(axon, seed: seed, mode: :train)
      sample = Composite.traverse(input, &Nx.broadcast(Nx.tensor(0, type: &1.type, backend: backend(model)), &1.shape))
      Nx.Defn.jit(init, jit_opts(model)).(sample, ModelState.empty())
    end

    ## Inference

    @doc """
    The model's output for `input` (inference mode), in one `ExBurn.Defn.Compiler` call.
    The program is compiled once per input shape and cached by the compiler: calling again
    with the same shapes replays it.
    """
    @spec forward(t(), Nx.Tensor.t() | map()) :: Nx.Container.t()
    def forward(%__MODULE__{} = model, input) do
      Spec.check_input!(model.input, input, "ExBurn.Model.forward")
      run_predict(model, input)
    end

    @doc """
    The model's output for `input`, as `forward/2`; with `batch_size: n` the input is split
    along its first axis into batches of `n` (the last may be smaller), each one compiled call,
    and the outputs concatenated.
    """
    @spec predict(t(), Nx.Tensor.t() | map(), keyword()) :: Nx.Container.t()
    def predict(%__MODULE__{} = model, input, opts \\ []) do
      fun = "ExBurn.Model.predict"
      opts = options!(opts, [:batch_size], fun)
      size = Spec.check_input!(model.input, input, fun)

      case opts[:batch_size] do
        nil ->
          run_predict(model, input)

        n when is_integer(n) and n > 0 ->
          0..(size - 1)//n
          |> Enum.map(fn start -> run_predict(model, slice(input, start, min(n, size - start))) end)
          |> concatenate()

        other ->
          raise ArgumentError, "#{fun}: :batch_size must be a positive integer, got #{inspect(other)}"
      end
    end

    @doc false
    def run_predict(model, input), do: Nx.Defn.jit(model.predict_fn, jit_opts(model)).(model.state, input)

    defp slice(%Nx.Tensor{} = t, start, len), do: Nx.slice_along_axis(t, start, len, axis: 0)
    defp slice(%{} = inputs, start, len), do: Map.new(inputs, fn {k, v} -> {k, slice(v, start, len)} end)

    defp concatenate([single]), do: single
    defp concatenate([%Nx.Tensor{} | _] = outs), do: Nx.concatenate(outs)

    defp concatenate([tuple | _] = outs) when is_tuple(tuple),
      do: outs |> Enum.map(&Tuple.to_list/1) |> Enum.zip_with(&concatenate/1) |> List.to_tuple()

    defp concatenate([%{} = map | _] = outs),
      do: Map.new(map, fn {k, _} -> {k, concatenate(Enum.map(outs, & &1[k]))} end)

    @doc false
    # The options of every compiled call of this model.
    def jit_opts(%__MODULE__{device: device}), do: [compiler: @compiler, device: device]

    @doc false
    def backend(%__MODULE__{device: device}), do: {ExBurn.Backend, device: device}

    ## Inspection

    @doc "A text table of the layers (name, op, output shape, parameters, frozen) and the totals."
    @spec summary(t()) :: String.t()
    def summary(%__MODULE__{} = model), do: Summary.table(model)

    @doc """
    Facts about the model: `:parameters` (element count), `:trainable_parameters`,
    `:frozen_parameters`, `:layer_state` (elements of batch-norm statistics, dropout keys...),
    `:bytes` (parameters and state), `:layers` (those with parameters or state), `:frozen_layers`, `:op_counts`, `:input_shape`, `:output_shape`, `:loss`,
    `:optimizer`, `:optimizer_opts`, `:device`, `:precision`, `:seed`.
    """
    @spec info(t()) :: map()
    def info(%__MODULE__{state: state} = model) do
      {_all, bytes} = Params.size(state.data)
      {count, _} = state |> Params.parameters() |> Params.size()
      {layer_state, _} = state |> Params.layer_state() |> Params.size()
      {trainable, _} = state |> ModelState.trainable_parameters() |> Params.size()

      %{
        parameters: count,
        trainable_parameters: trainable,
        frozen_parameters: count - trainable,
        layer_state: layer_state,
        bytes: bytes,
        layers: Params.layers(state.data),
        frozen_layers: model.frozen,
        op_counts: Axon.get_op_counts(model.model),
        input_shape: shapes(model.input),
        output_shape: shapes(model.output),
        loss: model.loss,
        optimizer: model.optimizer,
        optimizer_opts: model.optimizer_opts,
        device: model.device,
        precision: model.precision || {:f, 32},
        seed: model.seed
      }
    end

    defp shapes(%Nx.Tensor{shape: shape}), do: put_elem(shape, 0, nil)
    defp shapes(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.map(&shapes/1) |> List.to_tuple()
    defp shapes(%{} = map), do: Map.new(map, fn {k, v} -> {k, shapes(v)} end)

    ## Parameters

    @doc "Every tensor of the model (parameters and layer state) by name: `%{\"dense_0.kernel\" => tensor}`."
    @spec parameters(t()) :: %{String.t() => Nx.Tensor.t()}
    def parameters(%__MODULE__{state: state}), do: Params.flatten(state.data)

    @doc """
    The model with the tensors of `params` in place: a map `"layer.param" => tensor` (any
    subset), a nested map as Axon keeps them, or an `Axon.ModelState`. Every name must be
    the model's and every shape the same; tensors are cast to the parameter's type and copied
    to the model's device. Raises `ArgumentError` before changing anything otherwise.
    """
    @spec update_params(t(), map()) :: t()
    def update_params(%__MODULE__{} = model, params) do
      %{model | state: Params.put(model.state, params, backend(model), "ExBurn.Model.update_params")}
    end

    ## Burn's record files (one set of weights for Rust and Elixir)

    @doc """
    Writes the model's parameters to `path` as a Burn record (`NamedMpkFileRecorder` at full
    precision, as the Rust digits job saves), which Burn's `Module::load_file` loads into
    the equivalent Rust module. `mapping` pairs Burn module paths with Axon layer names
    (`ExBurn.Record.Axon`; `:auto` names each Burn layer as its Axon layer).
    """
    @spec export(t(), Path.t(), ExBurn.Record.Axon.mapping()) :: :ok | {:error, ExBurn.Error.t()}
    def export(%__MODULE__{} = model, path, mapping \\ :auto),
      do: ExBurn.Record.save(path, ExBurn.Record.Axon.from_model_state(model.state, mapping))

    @doc """
    The model with the parameters of the Burn record at `path` (e.g. a model the Rust job
    trained and saved), converted to Axon's layouts by `mapping` (`:auto` pairs the layers
    by kind in the file's order): `{:ok, model}` or `{:error, %ExBurn.Error{}}`. A shape that
    doesn't fit raises `ExBurn.Error` naming both sides.
    """
    @spec import_params(t(), Path.t(), ExBurn.Record.Axon.mapping()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
    def import_params(%__MODULE__{} = model, path, mapping \\ :auto) do
      with {:ok, %{params: params}} <- ExBurn.Record.read(path, device: model.device) do
        {:ok, %{model | state: ExBurn.Record.Axon.to_model_state(params, model.state, mapping)}}
      end
    end

    ## Files

    @doc "Writes the model to `path` (the format of the moduledoc): `:ok` or `{:error, %ExBurn.Error{}}`."
    @spec save(t(), Path.t()) :: :ok | {:error, ExBurn.Error.t()}
    def save(%__MODULE__{} = model, path), do: Store.save(model, path)

    @doc """
    Reads a model file. `target` is the Axon graph the file was saved from (the model is
    rebuilt with the file's loss, optimizer, input, precision and frozen layers) or a
    compiled `ExBurn.Model` (only its parameters are replaced). Gives `{:ok, model}` or
    `{:error, %ExBurn.Error{}}`: an unreadable, truncated, corrupted or foreign file, or
    parameters that don't match the model's.
    """
    @spec load(Path.t(), Axon.t() | t()) :: {:ok, t()} | {:error, ExBurn.Error.t()}
    def load(path, target), do: Store.load(path, target)

    @doc "As `load/2`, raising `ExBurn.Error`."
    @spec load!(Path.t(), Axon.t() | t()) :: t()
    def load!(path, target) do
      case load(path, target) do
        {:ok, model} -> model
        {:error, e} -> raise e
      end
    end

    @doc "The model's tensors as a binary (the file format, kind 2: parameters only)."
    @spec serialize_params(t()) :: binary()
    def serialize_params(%__MODULE__{} = model), do: ExBurn.Model.File.encode(parameters(model), %{}, :params)

    @doc """
    The tensors of a `serialize_params/1` binary, on `Nx.BinaryBackend`, by name:
    `{:ok, %{"layer.param" => tensor}}` (for `update_params/2`) or `{:error, %ExBurn.Error{}}`.
    """
    @spec deserialize_params(binary()) :: {:ok, %{String.t() => Nx.Tensor.t()}} | {:error, ExBurn.Error.t()}
    def deserialize_params(binary) do
      with {:ok, {params, _meta}} <- ExBurn.Model.File.decode(binary, :params, "ExBurn.Model.deserialize_params"),
           do: {:ok, params}
    end

    ## Precision

    @doc """
    The model with its floating-point parameters cast to `type` (`:f16`, `:bf16`, or `:f32`
    to go back) and an Axon mixed-precision policy (parameters and compute in `type`,
    output in f32) on its graph. Where the device has no bf16 arithmetic (Mesa's lavapipe, for
    one), bf16 parameters are stored as bf16 and computed in f32 (see `ExBurn.Backend`).
    """
    @spec quantize(t(), atom() | Nx.Type.t()) :: t()
    def quantize(%__MODULE__{} = model, type) do
      fun = "ExBurn.Model.quantize"

      type =
        case type do
          t when t in [:f16, :bf16, :f32, {:f, 16}, {:bf, 16}, {:f, 32}] -> Nx.Type.normalize!(t)
          other -> raise ArgumentError, "#{fun}: unsupported type #{inspect(other)} (types: :f16, :bf16, :f32)"
        end

      try do
        Nx.tensor(0.0, type: type, backend: backend(model)) |> Nx.add(1) |> Nx.to_binary()
      rescue
        e in ExBurn.Error ->
          reraise ExBurn.Error.new(
                    fun,
                    "#{Nx.Type.to_string(type)} is not supported on the device #{model.device}",
                    e.reason
                  ),
                  __STACKTRACE__
      end

      policy = Axon.MixedPrecision.create_policy(params: type, compute: type, output: {:f, 32})
      state = Params.map(model.state, fn t -> if Nx.Type.float?(t.type), do: Nx.as_type(t, type), else: t end)
      precision = if type == {:f, 32}, do: nil, else: type

      %{
        with_graph(model, Axon.MixedPrecision.apply_policy(model.model, policy))
        | state: state,
          precision: precision,
          optimizer_state: nil
      }
    end

    ## Freezing

    @doc """
    The model with `layers` frozen (a layer name, a list of names, or a function of the name
    giving a boolean): their parameters get no gradient and no update in training
    (`Axon.ModelState.freeze/2`). Names must be layers with parameters.
    """
    @spec freeze(t(), String.t() | [String.t()] | (String.t() -> boolean())) :: t()
    def freeze(%__MODULE__{} = model, layers),
      do: put_frozen(model, Enum.sort(Enum.uniq(model.frozen ++ layers!(model, layers, "ExBurn.Model.freeze"))))

    @doc "The model with `layers` unfrozen (as `freeze/2`; default `:all`)."
    @spec unfreeze(t(), :all | String.t() | [String.t()] | (String.t() -> boolean())) :: t()
    def unfreeze(model, layers \\ :all)
    def unfreeze(%__MODULE__{} = model, :all), do: put_frozen(model, [])

    def unfreeze(%__MODULE__{} = model, layers),
      do: put_frozen(model, model.frozen -- layers!(model, layers, "ExBurn.Model.unfreeze"))

    @doc "Whether `layer` is frozen."
    @spec frozen?(t(), String.t()) :: boolean()
    def frozen?(%__MODULE__{frozen: frozen}, layer), do: to_string(layer) in frozen

    @doc "The frozen layers, sorted."
    @spec frozen_layers(t()) :: [String.t()]
    def frozen_layers(%__MODULE__{frozen: frozen}), do: frozen

    defp layers!(model, fun_or_names, fun) do
      known = Params.layers(model.state.data)

      case fun_or_names do
        f when is_function(f, 1) ->
          Enum.filter(known, f)

        names ->
          names = names |> List.wrap() |> Enum.map(&to_string/1)

          case names -- known do
            [] ->
              names

            unknown ->
              raise ArgumentError,
                    "#{fun}: unknown layer(s) #{inspect(unknown)} (layers with parameters: #{inspect(known)})"
          end
      end
    end

    defp put_frozen(model, frozen) do
      state = model.state |> ModelState.unfreeze() |> ModelState.freeze(fn [layer | _] -> layer in frozen end)
      %{model | state: state, frozen: frozen}
    end

    ## Devices and copies

    @doc "The model with its tensors (and optimizer state) on `device` (a device string or `:cuda` / `:wgpu` / `:cpu`)."
    @spec to_device(t(), String.t() | atom()) :: t()
    def to_device(%__MODULE__{} = model, device) do
      model = %{model | device: device!(device, "ExBurn.Model.to_device")}
      copy_tensors(model, &Params.on_backend(&1, backend(model)))
    end

    @doc "A copy of the model whose tensors are new device buffers."
    @spec clone(t()) :: t()
    def clone(%__MODULE__{} = model), do: copy_tensors(model, &Nx.backend_copy(&1, backend(model)))

    defp copy_tensors(model, fun) do
      optimizer_state = with %{state: st} = o <- model.optimizer_state, do: %{o | state: Composite.traverse(st, fun)}
      %{model | state: Params.map(model.state, fun), optimizer_state: optimizer_state}
    end

    defp device!(nil, _fun), do: ExBurn.default_device_spec()

    defp device!(device, fun) do
      spec =
        try do
          ExBurn.device_spec(device)
        rescue
          e in ExBurn.Error ->
            reraise ExBurn.Error.new(fun, "unknown device #{inspect(device)}", e.details), __STACKTRACE__
        end

      try do
        Nx.tensor(0, backend: {ExBurn.Backend, device: spec}) |> Nx.to_binary()
        spec
      rescue
        e in ExBurn.Error ->
          reraise ExBurn.Error.new(fun, "the device #{inspect(device)} is not available", Exception.message(e)),
                  __STACKTRACE__
      end
    end

    ## Benchmarks

    @doc """
    Times `predict` on `input` (`mode: :predict`, the default) or a training step on
    `{x, y}` (`mode: :train`, `ExBurn.Training.train_step/3`, the state fed back), each call
    ended by a device sync, after `:warmup` calls (default 2; the first compiles). Gives
    `%{mode, iterations, batch_size, median_ms, min_ms, mean_ms, samples_per_sec}`.
    Options: `:mode`, `:iterations` (default 10), `:warmup`; with `mode: :train`, the
    options of `ExBurn.Training.train_step/3` too.
    """
    @spec benchmark(t(), term(), keyword()) :: map()
    def benchmark(%__MODULE__{} = model, input, opts \\ []), do: Benchmark.run(model, input, opts)

    ## Options

    @doc false
    # `opts` as a keyword list of known keys; raises ArgumentError naming `fun` otherwise.
    def options!(opts, allowed, fun) do
      unless Keyword.keyword?(opts),
        do: raise(ArgumentError, "#{fun}: options must be a keyword list, got #{inspect(opts, limit: 5)}")

      case Enum.uniq(Keyword.keys(opts)) -- allowed do
        [] ->
          opts

        unknown ->
          raise ArgumentError,
                "#{fun}: unknown option(s) #{Enum.map_join(Enum.uniq(unknown), ", ", &inspect/1)} (options: #{Enum.map_join(allowed, ", ", &inspect/1)})"
      end
    end

    defimpl Inspect do
      def inspect(model, _opts) do
        {count, _} = model.state |> ExBurn.Model.Params.parameters() |> ExBurn.Model.Params.size()
        frozen = if model.frozen == [], do: "", else: ", frozen: #{Kernel.inspect(model.frozen)}"

        "#ExBurn.Model<parameters: #{count}, loss: #{Kernel.inspect(model.loss)}, optimizer: #{Kernel.inspect(model.optimizer)}, device: #{Kernel.inspect(model.device)}#{frozen}>"
      end
    end
  end
end
