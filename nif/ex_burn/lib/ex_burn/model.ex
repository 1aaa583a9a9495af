if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model do
    @moduledoc """
    Model definition and training orchestration for ExBurn: an Axon model with its parameters
    on an ExBurn device, its loss and its optimizer.

        model =
          Axon.input("input", shape: {nil, 784})
          |> Axon.dense(256)
          |> Axon.relu()
          |> Axon.dropout(rate: 0.2)
          |> Axon.dense(10)

        compiled = ExBurn.Model.compile(model, loss: :cross_entropy, optimizer: :adam)
        {:ok, output} = ExBurn.Model.forward(compiled, input_tensor)
        trained = ExBurn.Training.fit(compiled, {train_x, train_y}, epochs: 10, batch_size: 32)
        :ok = ExBurn.Model.save(trained, "model.bin")
        {:ok, model} = ExBurn.Model.load(trained, "model.bin")

    `forward/2` binds the parameters and the input to the Axon graph and runs it as one
    `Nx.Defn.jit/2` call with `ExBurn.Defn.Compiler` on the model's device (compiled once per
    input shape, then replayed). Training (`ExBurn.Training`) computes exact gradients
    (`Nx.Defn.value_and_grad/3`), each step one compiled call.

    ## The struct

    The documented fields: `device` (`:gpu` or `:cpu`), `frozen_layers` (a `MapSet` of layer
    names), `loss_fn` (`:cross_entropy`, `:mse`, `:binary_cross_entropy` or a function),
    `optimizer` (`:adam`, `:sgd`, `:rmsprop`, `:adamw`), `optimizer_state` (of the last
    training run, so that training continues where it stopped), `weight_decay`, `compiled`.
    The Axon graph is `model` and its `Axon.ModelState` (parameters and layer state) is
    `state` (what the documents call `axon_model` and `params`; `parameters/1` gives the
    parameters by name). Beside them: `device_spec` (the device string of
    `ExCubecl.devices/0`), `input` / `output` (templates), `seed`, `loss_opts`,
    `optimizer_opts`, `output_activation` (the output layer's activation, which tells the
    cross-entropy whether the outputs are logits or probabilities) and `precision`
    (`quantize/2`).

    Parameters are named `"layer.param"` (`parameters/1`), the form `update_params/2` takes.

    ## Files

    `save/2` writes, and `load/2` reads, the format of `ExBurn.Model.File` (a header with a
    magic, version and CRC-32, an index and the tensors' bytes); `export/3` writes the
    parameters as compressed Erlang terms, JSON or a Burn record, which `import_params/3`
    reads back. A file that is truncated, corrupted or not an ExBurn file gives
    `{:error, message}` and nothing is half-loaded.

    ## Errors

    Bad arguments raise `ArgumentError` whose message starts with the function
    (`"ExBurn.Model.compile: unknown loss :foo ..."`); device failures raise `ExBurn.Error`.
    Functions documented to give `{:error, reason}` give a message string that starts with
    the function's name.
    """

    alias ExBurn.Model.{Benchmark, Build, Export, Inference, Layers, Params, Store, Summary}

    defstruct [
      :model,
      :state,
      :loss_fn,
      :optimizer,
      :device,
      :device_spec,
      :input,
      :output,
      :seed,
      :predict_fn,
      :output_activation,
      compiled: true,
      weight_decay: 0.0,
      loss_opts: [],
      optimizer_opts: [],
      frozen_layers: MapSet.new(),
      precision: nil,
      optimizer_state: nil
    ]

    @type t :: %__MODULE__{
            model: Axon.t(),
            state: %Axon.ModelState{},
            compiled: boolean(),
            device: :cpu | :gpu,
            device_spec: String.t(),
            frozen_layers: MapSet.t(),
            loss_fn: atom() | function(),
            optimizer: atom(),
            optimizer_state: map() | nil,
            weight_decay: float()
          }

    ## Building

    @doc """
    Compiles an Axon model for training with the ExBurn backend: checks the options and
    initialises the parameters with the graph's initialisers (Glorot/Xavier uniform kernels,
    zero biases), one compiled call on the device.

    ## Options

      * `:loss` - `:cross_entropy`, `:mse`, `:binary_cross_entropy` (default `:cross_entropy`),
        or a function `(y_true, y_pred) -> scalar`. See `ExBurn.Model.Loss`.
      * `:optimizer` - `:adam`, `:sgd`, `:rmsprop` (default `:adam`), also `:adamw`, or
        `{name, opts}` with the optimizer's options (`ExBurn.Training.Optimizer`).
      * `:learning_rate` - default `0.001`.
      * `:device` - `:gpu` or `:cpu` (`ExBurn.Model.Device`). Default: the default device, a
        GPU where there is one, else the CPU device.
      * `:weight_decay` - L2 regularization coefficient (default `0.0`).
      * `:loss_opts` - `from_logits: boolean` to override what the graph's output layer says.
      * `:input` - the input: a shape (`{nil, 784}`), a tensor or template, or a map of input
        name to either. Default: the shapes the model's `Axon.input/2` layers declare.
      * `:input_type` - the type of inputs given by shape (default `{:f, 32}`).
      * `:seed` - the seed of the initialisation (default: a new one, kept in `:seed`).

    Returns an `ExBurn.Model` struct ready for training.
    """
    @spec compile(Axon.t(), keyword()) :: t()
    def compile(axon_model, opts \\ []), do: Build.compile(axon_model, opts)

    @doc "A model struct with `fields` set (`struct!/2`); `compile/2` builds a usable one."
    @spec new(keyword()) :: t()
    def new(fields \\ []), do: struct!(__MODULE__, fields)

    ## Inference

    @doc """
    Runs a forward pass through the model on its device, in one `ExBurn.Defn.Compiler` call
    (inference mode: dropout off). Gives `{:ok, output}` or `{:error, reason}` (an input that
    doesn't fit the model, a device failure).
    """
    @spec forward(t(), Nx.Tensor.t() | map()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
    def forward(%__MODULE__{} = model, input), do: Inference.forward(model, input)

    @doc """
    Runs a forward pass through the model, as `forward/2`; with `batch_size: n` the input is
    split along its first axis into batches of `n`, each one compiled call, and the outputs
    concatenated. Gives `{:ok, output}` or `{:error, reason}`.
    """
    @spec predict(t(), Nx.Tensor.t() | map(), keyword()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
    def predict(%__MODULE__{} = model, input, opts \\ []), do: Inference.predict(model, input, opts)

    @doc """
    The output shape and type of the model, from the Axon graph alone (nothing runs):
    `%{output_shape: {nil, 10}, output_type: :f32}`.
    """
    @spec forward_pattern(t()) :: %{output_shape: tuple() | nil, output_type: atom()}
    def forward_pattern(%__MODULE__{} = model), do: Inference.pattern(model)

    @doc """
    Computes the loss between predictions and targets: `{:ok, loss}` (a scalar tensor) or
    `{:error, reason}`. `:cross_entropy` is computed from logits with log-softmax stability
    (or from probabilities when the model ends in softmax), with one-hot or integer class
    targets; `:mse`; `:binary_cross_entropy`. With the model's weight decay `wd > 0`, the L2
    term `wd / 2 * sum(w ** 2)` over the trainable parameters is added (its gradient is the
    `wd * w` that training adds to each gradient).
    """
    @spec compute_loss(t(), Nx.Tensor.t(), Nx.Tensor.t()) :: {:ok, Nx.Tensor.t()} | {:error, String.t()}
    def compute_loss(%__MODULE__{} = model, pred, target), do: Inference.compute_loss(model, pred, target)

    @doc "Trains the model: `ExBurn.Training.fit/3`, which gives the trained model."
    @spec fit(t(), term(), keyword()) :: t()
    def fit(%__MODULE__{} = model, data, opts \\ []), do: ExBurn.Training.fit(model, data, opts)

    ## Inspection

    @doc """
    A Keras/PyTorch-style table of the layers (name, type, output shape, parameter count) and
    the totals (`Total params:`, `Trainable params:`).
    """
    @spec summary(t()) :: String.t()
    def summary(%__MODULE__{} = model), do: Summary.table(model)

    @doc """
    A map with the model's facts: `:total_params`, `:trainable_params`, `:frozen_params`,
    `:layer_count`, `:loss_fn`, `:optimizer`, `:device`, `:memory_bytes` (parameters and
    layer state), and `:layers`, `:frozen_layers`, `:op_counts`, `:input_shape`,
    `:output_shape`, `:optimizer_opts`, `:weight_decay`, `:device_spec`, `:precision`,
    `:seed`.
    """
    @spec info(t()) :: map()
    def info(%__MODULE__{} = model), do: Summary.info(model)

    @doc "The model's loss function (`:cross_entropy`, `:mse`, `:binary_cross_entropy`, or a function)."
    @spec loss_function(t()) :: atom() | function()
    def loss_function(%__MODULE__{loss_fn: loss}), do: loss

    @doc "The model's optimizer (`:adam`, `:sgd`, `:rmsprop`, `:adamw`)."
    @spec optimizer(t()) :: atom()
    def optimizer(%__MODULE__{optimizer: optimizer}), do: optimizer

    @doc "The model's weight decay (L2) coefficient."
    @spec weight_decay(t()) :: float()
    def weight_decay(%__MODULE__{weight_decay: wd}), do: wd

    ## Parameters

    @doc "The current parameters (and layer state) by name: `%{\"dense_0.kernel\" => tensor}`."
    @spec parameters(t()) :: %{String.t() => Nx.Tensor.t()}
    def parameters(%__MODULE__{state: state}), do: Params.flatten(state.data)

    @doc """
    Returns a new model with updated parameters: a map `"layer.param" => tensor` (any
    subset), a nested map as Axon keeps them, or an `Axon.ModelState`. Every name must be the
    model's and every shape the same; tensors are cast to the parameter's type and copied to
    the model's device. Raises `ArgumentError` before changing anything otherwise.
    """
    @spec update_params(t(), map()) :: t()
    def update_params(%__MODULE__{} = model, new_params),
      do: %{model | state: Params.put(model.state, new_params, backend(model), "ExBurn.Model.update_params")}

    @doc "A deep copy of the model: the same configuration, its tensors copied into new device buffers."
    @spec clone(t()) :: t()
    def clone(%__MODULE__{} = model), do: Build.copy_tensors(model, &Nx.backend_copy(&1, backend(model)))

    ## Files

    @doc "Saves the model (parameters and configuration) to `path`: `:ok` or `{:error, reason}`."
    @spec save(t(), Path.t()) :: :ok | {:error, String.t()}
    def save(%__MODULE__{} = model, path), do: Store.save(model, path)

    @doc """
    Loads the parameters saved at `path` into `model` (a compiled `ExBurn.Model`, whose
    parameters are replaced, or the Axon graph the file was saved from, rebuilt with the
    file's loss, optimizer, input, precision and frozen layers): `{:ok, model}` or
    `{:error, reason}`.
    """
    @spec load(t() | Axon.t(), Path.t()) :: {:ok, t()} | {:error, String.t()}
    def load(model, path), do: Store.load(model, path)

    @doc "Serializes the parameters to a binary (the file format, kind 2: parameters only)."
    @spec serialize_params(t()) :: binary()
    def serialize_params(%__MODULE__{} = model), do: ExBurn.Model.File.encode(parameters(model), %{}, :params)

    @doc """
    The parameters of a `serialize_params/1` binary, on `Nx.BinaryBackend`, by name:
    `{:ok, %{"layer.param" => tensor}}` (for `update_params/2`) or `{:error, reason}`.
    """
    @spec deserialize_params(binary()) :: {:ok, map()} | {:error, String.t()}
    def deserialize_params(binary) do
      case ExBurn.Model.File.decode(binary, :params, "ExBurn.Model.deserialize_params") do
        {:ok, {params, _meta}} -> {:ok, params}
        {:error, e} -> {:error, Exception.message(e)}
      end
    end

    @doc """
    Exports the parameters to `path` in a portable format: `:ok` or `{:error, reason}`.

    ## Options

      * `:format` - `:elixir_terms` (default: compressed Erlang terms), `:json` (readable,
        larger; needs Elixir 1.18's `JSON`), or `:burn` (a Burn record, `NamedMpkFileRecorder`
        at full precision, which Burn's `Module::load_file` reads into the equivalent Rust
        module).
      * `:mapping` - for `:burn`: Burn module paths paired with Axon layer names
        (`ExBurn.Record.Axon`; default `:auto`).

    A mapping given as the third argument (`export(model, path, [{"fc1", "dense_0"}])`) is
    `format: :burn, mapping: mapping`.
    """
    @spec export(t(), Path.t(), keyword() | ExBurn.Record.Axon.mapping()) :: :ok | {:error, String.t()}
    def export(%__MODULE__{} = model, path, opts \\ []), do: Export.export(model, path, opts)

    @doc """
    The model with the parameters of a file written by `export/3`, by `save/2`, or by Burn
    (a record): `{:ok, model}` or `{:error, reason}`. The format is recognised from the
    file's contents; options: `:format` to insist on one, `:mapping` for Burn records.
    """
    @spec import_params(t(), Path.t(), keyword() | ExBurn.Record.Axon.mapping()) :: {:ok, t()} | {:error, String.t()}
    def import_params(%__MODULE__{} = model, path, opts \\ []), do: Export.import(model, path, opts)

    ## Precision

    @doc """
    Quantizes the floating-point parameters to `dtype` (`:f16`, `:bf16`, or `:f32` to go
    back), with an Axon mixed-precision policy on the graph (parameters and compute in
    `dtype`, output in f32). Where the device has no bf16 arithmetic (lavapipe), bf16
    parameters are stored as bf16 and computed in f32.
    """
    @spec quantize(t(), :f16 | :bf16 | :f32) :: t()
    def quantize(%__MODULE__{} = model, dtype), do: Build.quantize(model, dtype)

    ## Freezing

    @doc """
    Freezes `layer_names` (names as strings or atoms; also one name, or a function of the name
    giving a boolean): their parameters get no gradient and no update in training. Names
    must be layers with parameters.
    """
    @spec freeze(t(), [atom() | String.t()] | String.t() | (String.t() -> boolean())) :: t()
    def freeze(%__MODULE__{} = model, layer_names), do: Layers.freeze(model, layer_names)

    @doc "Unfreezes `layer_names` (as `freeze/2`; `:all` unfreezes every layer)."
    @spec unfreeze(t(), :all | [atom() | String.t()] | String.t() | (String.t() -> boolean())) :: t()
    def unfreeze(%__MODULE__{} = model, layer_names), do: Layers.unfreeze(model, layer_names)

    @doc "Whether the layer is frozen."
    @spec frozen?(t(), atom() | String.t()) :: boolean()
    def frozen?(%__MODULE__{frozen_layers: frozen}, layer_name), do: MapSet.member?(frozen, to_string(layer_name))

    @doc "The frozen layer names, a `MapSet`."
    @spec frozen_layers(t()) :: MapSet.t()
    def frozen_layers(%__MODULE__{frozen_layers: frozen}), do: frozen

    ## Devices

    @doc """
    Moves the parameters (and the optimizer state) to `device`: `:gpu` (the best hardware
    device) or `:cpu` (the CPU device), or a device string of `ExCubecl.devices/0`. A no-op
    when the model is there already. Raises `ExBurn.Error` where the device is missing.
    """
    @spec to_device(t(), :cpu | :gpu | String.t()) :: t()
    def to_device(%__MODULE__{} = model, device), do: Build.to_device(model, device)

    ## Benchmarks

    @doc """
    Benchmarks the forward pass on `input`: `:warmup` runs (default 3; the first compiles),
    then `:runs` timed runs (default 10), each ended by a device sync. Gives `%{avg_ms,
    min_ms, max_ms, median_ms, std_ms}` and `%{runs, batch_size, samples_per_sec, mode}`.
    With `mode: :train` and `input` a batch `{x, y}`, times training steps
    (`ExBurn.Training.train_step/3`, whose options it passes on) instead.
    """
    @spec benchmark(t(), term(), keyword()) :: map()
    def benchmark(%__MODULE__{} = model, input, opts \\ []), do: Benchmark.run(model, input, opts)

    ## Shared helpers

    @doc false
    # The options of every compiled call of this model.
    def jit_opts(%__MODULE__{device_spec: device}), do: [compiler: ExBurn.Defn.Compiler, device: device]

    @doc false
    def backend(%__MODULE__{device_spec: device}), do: {ExBurn.Backend, device: device}

    @doc false
    def run_predict(model, input), do: Inference.run(model, input)

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

        frozen =
          if MapSet.size(model.frozen_layers) == 0,
            do: "",
            else: ", frozen: #{Kernel.inspect(Enum.sort(model.frozen_layers))}"

        "#ExBurn.Model<parameters: #{count}, loss: #{Kernel.inspect(model.loss_fn)}, optimizer: #{Kernel.inspect(model.optimizer)}, device: #{Kernel.inspect(model.device)} (#{model.device_spec})#{frozen}>"
      end
    end
  end
end
