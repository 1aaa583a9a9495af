defmodule ExBurn.Serving do
  @moduledoc """
  Batched, concurrent inference of a model on the device through `Nx.Serving` (so ExBurn
  fits Bumblebee-style production pipelines): each batch is one call of a program compiled
  by `ExBurn.Defn.Compiler`.

      serving = ExBurn.Serving.build(model, batch_size: 16, batch_timeout: 100)
      output = Nx.Serving.run(serving, input)                          # inline, in the caller

      children = [
        {Nx.Serving, serving: ExBurn.Serving.build(model, batch_size: 32), name: :my_model_serving}
      ]
      Supervisor.start_link(children, strategy: :one_for_one)
      output = Nx.Serving.batched_run(:my_model_serving, input)        # batched with other callers

  or as a value: `ExBurn.Serving.new/2` gives an `%ExBurn.Serving{}` (its options, checked),
  which `with_batch_size/2`, `with_timeout/2` and `status/1` read and change, `run/2` runs,
  and `build/2` and `supervise/2` take in place of a model.

  ## Options

    * `:batch_size` - the most inputs batched together (default `32`).
    * `:batch_timeout` - the most milliseconds a started serving waits for a full batch
      (default `50`).
    * `:partitions` - the number of serving partitions, each running batches concurrently
      with its own compiled program on its device (default: `System.schedulers_online()`),
      spread in turn over the serving's devices (`:device`); `true` is one partition per
      device: those of a `:device` list, or without `:device` every GPU of the default
      device's runtime (the compiler's `__partitions_options__/1`). A partition applies
      to a started serving; an inline run uses one, on the first device.
    * `:padding` - whether to pad every batch to `:batch_size` (default `false`). Padded, a
      serving runs one program of one shape (compiled when it starts, where the example's
      shape is known) and drops the padding rows' results; unpadded, each batch runs at its
      size (a program compiled, then cached, per size).
    * `:shape` - the shape of one example, without the batch axis (`{784}` for a batch
      `{n, 784}`). Default: the Axon model's input shape less its batch axis, where the model
      has a single input with a known shape; none for a function. Needed by `supervise/2`.
    * `:type` - the type of the examples (default `:f32`): inputs are cast to it. Only with a
      known shape.
    * `:device` - `:gpu`, `:cpu`, or a device string (default
      `ExBurn.default_device_spec/0`); or a list of them, the devices of the partitions
      (`device: ["cuda:0", "cuda:1"], partitions: true`).

  ## Models

    * `%ExBurn.Model{}` - its `model` (an Axon graph) and `state`, as the tuple.
    * `{axon_model, model_state}` - an `Axon` graph and its `Axon.ModelState` (or parameter
      map); predictions come from `Axon.build/2`'s predict function in `:inference` mode.
    * a function of one argument - called with a batch tensor (first axis: the examples), it
      returns a tensor or container of tensors whose first axis runs over the same examples.
      It is compiled as a `defn` would be, so it must be made of `Nx` calls.

  The parameters are copied to each of the serving's devices once, at `build/2`; every
  partition runs its batches with the copy on its device.

  ## Inputs and outputs

    * a tensor is a **batch**: its first axis runs over the examples (`{n, features...}`, n
      >= 1); the result is the model's output for those `n` examples (first axis `n`).
    * a list of tensors is a list of single **examples** (each without the batch axis); the
      result is a list of the model's outputs, one per example, without the batch axis.
    * an `Nx.Batch` is run as it is; the result is as for a tensor.

  Inputs stay where they are in the caller: the partition that runs a batch builds it on its
  own device, the parts on the host (`Nx.BinaryBackend` or any other backend) joined there and
  uploaded at once with the model's call, a part already on that device used as it is, one on
  another device copied device to device. The outputs stay on the partition's device (only a
  caller on another node gets them copied to the host, see below). When the
  example's shape is known (the `:shape` option, or the Axon model's input shape), inputs are
  checked against it in the caller (an `ExBurn.Error` naming the shapes, before anything
  reaches the serving process) and cast to its `:type`.

  ## Batching

  A started serving gathers the inputs of concurrent callers until `:batch_size` examples are
  waiting or `:batch_timeout` milliseconds have passed since the first, runs them as one
  batch on a free partition, and gives each caller its own rows (`Nx.Serving` does the
  gathering and the splitting). An input larger than `:batch_size` is split over several
  batches; an inline run splits the same way. `ExBurn.Serving.Server` holds the
  `Nx.Serving` callbacks.

  A request's rows can end up in two batches (the end of one, the start of the next) that
  run on two partitions at once; `Nx.Serving` (0.13) joins the parts in the order they come
  back, which is not always the order of the rows. So each request goes with its rows'
  numbers (on the host: they never reach a device), which come back beside the outputs, and
  the caller puts its rows back in order where they came back out of it.

  ## Across BEAM nodes

  A started serving joins `Nx.Serving`'s process group (`:pg`) under its name, so that any
  connected node can call it: `run({:distributed, name}, input)` (or `run(name, input)`
  where no local serving has the name) picks a serving of that name on some node. The
  input is copied to the host before it leaves the caller (a device tensor is a handle
  that means nothing on another node), and the serving's node copies the results to the
  host (`Nx.BinaryBackend`) before it replies: the caller gets `Nx.BinaryBackend` tensors.
  `Nx.Serving.batched_run/3` works too: the serving copies its results to the host
  itself, and the caller gives `&Nx.backend_copy(&1, Nx.BinaryBackend)` as the third
  argument for inputs on a device.
  """

  @enforce_keys [:model]
  defstruct model: nil, batch_size: 32, batch_timeout: 50, partitions: 1, padding: false, options: []

  @typedoc "A model: an `%ExBurn.Model{}` (or `{axon_model, model_state}`, or a function of a batch)."
  @type model :: ExBurn.Model.t() | {struct(), term()} | (Nx.Tensor.t() -> term())

  @typedoc """
  A serving's settings. `options` holds the other options of `new/2` (`:shape`, `:type`,
  `:device`).
  """
  @type t :: %__MODULE__{
          batch_size: pos_integer(),
          batch_timeout: pos_integer(),
          model: model(),
          padding: boolean(),
          partitions: pos_integer(),
          options: keyword()
        }

  alias Nx.Defn.Composite

  @serving_defaults [batch_size: 32, batch_timeout: 50, partitions: nil, padding: false]
  @model_defaults [shape: nil, type: nil, device: nil]
  @build_defaults @serving_defaults ++ @model_defaults
  @process_keys [:name, :supervisor, :shutdown, :hibernate_after, :spawn_opt]

  ## Building

  @doc """
  Creates an ExBurn serving for a compiled model: an `%ExBurn.Serving{}` holding the model
  and the options (see the module documentation), checked here. Pass it to `run/2`,
  `build/2` or `supervise/2`.

      iex> serving = ExBurn.Serving.new(&Nx.multiply(&1, 2), batch_size: 8, partitions: 2)
      iex> ExBurn.Serving.status(serving)
      %{batch_size: 8, batch_timeout: 50, partitions: 2, padding: false}
  """
  @spec new(model(), keyword()) :: t()
  def new(model, opts \\ []) do
    op = "ExBurn.Serving.new"
    opts = options!(op, opts, @build_defaults)
    _ = model!(op, model)
    {partitions, devices} = partitions!(op, opts[:partitions], opts[:device])
    # partitions: true without :device keeps the devices it chose, so that build/2 spreads
    # the partitions over them.
    opts = if opts[:partitions] == true and opts[:device] == nil, do: Keyword.put(opts, :device, devices), else: opts

    %__MODULE__{
      model: model,
      batch_size: batch_size!(op, opts[:batch_size]),
      batch_timeout: timeout!(op, opts[:batch_timeout]),
      partitions: partitions,
      padding: padding!(op, opts[:padding]),
      options: for({key, _} <- @model_defaults, opts[key] != nil, do: {key, opts[key]})
    }
  end

  @doc """
  Builds an `Nx.Serving` for `model` (or an `%ExBurn.Serving{}`, whose settings `opts`
  override) and the options: the primary entry point for production use. The serving runs
  with `Nx.Serving.run/2` (or `run/2`), or supervised in an application tree.

      serving = ExBurn.Serving.build(model, batch_size: 16, batch_timeout: 100)
      output = Nx.Serving.run(serving, input)
  """
  @spec build(model() | t(), keyword()) :: Nx.Serving.t()
  def build(model, opts \\ [])

  def build(%__MODULE__{} = serving, opts), do: build(serving.model, Keyword.merge(settings(serving), opts))

  def build(model, opts) do
    op = "ExBurn.Serving.build"
    opts = options!(op, opts, @build_defaults)
    batch_size = batch_size!(op, opts[:batch_size])
    timeout = timeout!(op, opts[:batch_timeout])
    {partitions, devices} = partitions!(op, opts[:partitions], opts[:device])
    padding = padding!(op, opts[:padding])

    # The partitions' devices, in turn over the serving's; the parameters once on each.
    placed = devices |> Stream.cycle() |> Enum.take(partitions)
    {fun, params, model_shape} = model!(op, model)
    example = example!(op, opts[:shape] || model_shape, opts[:type])
    params = if params, do: Map.new(Enum.uniq(placed), &{&1, on_device(params, &1)})

    arg = %{
      fun: fun,
      params: params,
      example: example,
      batch_size: batch_size,
      padding: padding,
      device: hd(placed),
      partitions: partitions
    }

    Nx.Serving.new(ExBurn.Serving.Server, arg, compiler: ExBurn.Defn.Compiler, device: placed)
    |> Nx.Serving.batch_size(batch_size)
    |> Nx.Serving.process_options(batch_timeout: timeout, partitions: true)
    |> Nx.Serving.client_preprocessing(&preprocess(&1, example))
    |> Nx.Serving.client_postprocessing(&postprocess/2)
    |> Nx.Serving.distributed_postprocessing(&to_host/1)
  end

  @doc """
  The settings of a serving (an `%ExBurn.Serving{}`, or an `Nx.Serving` of `build/2`) as a
  map: `%{batch_size:, batch_timeout:, partitions:, padding:}`.
  """
  @spec status(t() | Nx.Serving.t()) :: map()
  def status(%__MODULE__{} = s), do: Map.take(s, [:batch_size, :batch_timeout, :partitions, :padding])

  def status(%Nx.Serving{module: ExBurn.Serving.Server, arg: arg, defn_options: defn, process_options: process}) do
    %{
      batch_size: arg.batch_size,
      batch_timeout: process[:batch_timeout],
      partitions: length(defn[:device]),
      padding: arg.padding
    }
  end

  def status(other),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Serving.status",
          "expects an %ExBurn.Serving{} or a serving of build/2",
          inspect(other, limit: 3)
        )
      )

  @doc """
  The serving with batch size `batch_size`.

      iex> ExBurn.Serving.new(&Nx.negate/1) |> ExBurn.Serving.with_batch_size(4) |> ExBurn.Serving.status()
      %{batch_size: 4, batch_timeout: 50, partitions: System.schedulers_online(), padding: false}
  """
  @spec with_batch_size(t(), pos_integer()) :: t()
  def with_batch_size(%__MODULE__{} = s, batch_size),
    do: %{s | batch_size: batch_size!("ExBurn.Serving.with_batch_size", batch_size)}

  @doc "The serving with batch timeout `timeout` (milliseconds)."
  @spec with_timeout(t(), pos_integer()) :: t()
  def with_timeout(%__MODULE__{} = s, timeout),
    do: %{s | batch_timeout: timeout!("ExBurn.Serving.with_timeout", timeout)}

  defp settings(%__MODULE__{} = s) do
    [batch_size: s.batch_size, batch_timeout: s.batch_timeout, partitions: s.partitions, padding: s.padding] ++
      s.options
  end

  defp batch_size!(_op, n) when is_integer(n) and n > 0, do: n
  defp batch_size!(op, n), do: raise(ExBurn.Error.new(op, ":batch_size must be a positive integer, got #{inspect(n)}"))

  defp timeout!(_op, n) when is_integer(n) and n >= 0, do: n

  defp timeout!(op, n),
    do: raise(ExBurn.Error.new(op, ":batch_timeout must be a non-negative integer of milliseconds, got #{inspect(n)}"))

  # {count, devices}: the serving's devices (the :device option's, one or a list; without
  # it, the default device, or for partitions: true the compiler's, one per GPU) and the
  # number of partitions (nil: one per scheduler; true: one per device).
  defp partitions!(op, partitions, device) do
    devices =
      case {device, partitions} do
        {nil, true} -> Enum.map(ExBurn.Defn.Compiler.__partitions_options__([]), &Keyword.fetch!(&1, :device))
        {nil, _} -> [ExBurn.default_device_spec()]
        {[_ | _] = list, _} -> Enum.map(list, &device!(op, &1))
        {[], _} -> raise ExBurn.Error.new(op, ":device must be a device or a non-empty list of devices, got []")
        {one, _} -> [device!(op, one)]
      end

    count =
      case partitions do
        nil -> System.schedulers_online()
        true -> length(devices)
        n when is_integer(n) and n > 0 -> n
        n -> raise ExBurn.Error.new(op, ":partitions must be a positive integer or true, got #{inspect(n)}")
      end

    {count, devices}
  end

  # A device string, checked by running a small tensor there (ExBurn.Error naming `op`).
  defp device!(op, device), do: elem(ExBurn.Model.Device.resolve!(device, op), 1)

  defp padding!(_op, p) when is_boolean(p), do: p
  defp padding!(op, p), do: raise(ExBurn.Error.new(op, ":padding must be true or false, got #{inspect(p)}"))

  # {function, params or nil, example shape from the model or nil}
  defp model!(op, %{__struct__: ExBurn.Model, model: model, state: state}), do: model!(op, {model, state})

  defp model!(op, {%{__struct__: Axon} = model, state}) do
    unless Code.ensure_loaded?(Axon), do: raise(ExBurn.Error.new(op, "an Axon model needs the :axon dependency"))
    {model_fun(model), state, axon_shape!(op, model)}
  end

  defp model!(_op, fun) when is_function(fun, 1), do: {fun, nil, nil}

  defp model!(op, other),
    do:
      raise(
        ExBurn.Error.new(
          op,
          "the model must be {axon_model, model_state}, an %ExBurn.Model{} or a function of one batch tensor",
          "got #{inspect(other, limit: 3)}"
        )
      )

  if Code.ensure_loaded?(Axon) do
    defp model_fun(model) do
      {_init, predict} = Axon.build(model, mode: :inference)
      predict
    end

    defp axon_shape!(op, model) do
      case Map.to_list(Axon.get_inputs(model)) do
        [{_name, shape}] when is_tuple(shape) and tuple_size(shape) > 0 ->
          example = Tuple.delete_at(shape, 0)
          if Enum.all?(Tuple.to_list(example), &is_integer/1), do: example

        [{_name, _unknown}] ->
          nil

        inputs ->
          raise ExBurn.Error.new(
                  op,
                  "the serving runs models of one input; this model has #{length(inputs)}",
                  "inputs: #{inspect(Map.new(inputs))}"
                )
      end
    end
  else
    defp model_fun(_model), do: nil
    defp axon_shape!(_op, _model), do: nil
  end

  defp example!(_op, nil, nil), do: nil
  defp example!(op, nil, type), do: raise(ExBurn.Error.new(op, ":type #{inspect(type)} needs the example's :shape"))

  defp example!(op, shape, type) when is_tuple(shape) do
    unless Enum.all?(Tuple.to_list(shape), &(is_integer(&1) and &1 > 0)),
      do:
        raise(
          ExBurn.Error.new(
            op,
            ":shape must be a tuple of positive integers (one example, without the batch axis), got #{inspect(shape)}"
          )
        )

    type =
      try do
        Nx.Type.normalize!(type || :f32)
      rescue
        _ -> raise ExBurn.Error.new(op, "unknown :type #{inspect(type)}")
      end

    Nx.template(shape, type)
  end

  defp example!(op, shape, _type),
    do:
      raise(ExBurn.Error.new(op, ":shape must be a tuple (one example, without the batch axis), got #{inspect(shape)}"))

  ## Running

  @doc """
  Runs inference on `input` (a batch tensor, a list of example tensors, or an `Nx.Batch`)
  with a serving: inline in this process for an `%ExBurn.Serving{}` or an `Nx.Serving`
  (a convenience wrapper around `Nx.Serving.run/2`), through the started serving for a name
  (`Nx.Serving.batched_run/2`, batched with other callers). See the module documentation
  for what comes back.

      iex> serving = ExBurn.Serving.new(&Nx.multiply(&1, 2), batch_size: 4)
      iex> ExBurn.Serving.run(serving, Nx.tensor([[1.0, 2.0]])) |> Nx.to_list()
      [[2.0, 4.0]]
  """
  @spec run(t() | Nx.Serving.t() | atom() | {:local | :distributed, atom()}, term()) :: term()
  def run(%__MODULE__{} = serving, input), do: Nx.Serving.run(build(serving), input)
  def run(%Nx.Serving{} = serving, input), do: Nx.Serving.run(serving, input)

  def run(name, input) when is_atom(name) or (is_tuple(name) and elem(name, 0) in [:local, :distributed]),
    do: Nx.Serving.batched_run(name, input, &to_host/1)

  def run(other, _input),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Serving.run",
          "expected a serving (of build/2) or the name of a started one",
          "got #{inspect(other, limit: 3)}"
        )
      )

  @doc """
  A child spec of a serving process named `:name`, for a supervision tree; or, with
  `:supervisor` (a `Supervisor` or a `DynamicSupervisor`), the serving started under that
  supervisor (`Supervisor.start_child/2`'s or `DynamicSupervisor.start_child/2`'s
  answer). `serving_or_model` is a serving of `build/2`, an `%ExBurn.Serving{}`, or a model,
  built here with the options of `build/2`.

  ## Options

    * `:name` - an atom, the name to `run/2` with (required).
    * `:supervisor` - a supervisor to start the serving under now.
    * `:batch_size`, `:batch_timeout`, `:partitions`, `:padding`, `:shape`, `:type`,
      `:device` - as `build/2` (for an `Nx.Serving`, `:batch_timeout` overrides its own, and
      `:batch_size` must agree with it).
    * `:shutdown`, `:hibernate_after`, `:spawn_opt` - as `Nx.Serving.start_link/1`.

  The example's shape must be known (so that a caller's bad input fails in the caller, not in
  the batch it would share with others).
  """
  @spec supervise(Nx.Serving.t() | t() | model(), keyword()) :: Supervisor.child_spec() | Supervisor.on_start_child()
  def supervise(serving_or_model, opts) do
    op = "ExBurn.Serving.supervise"
    opts = options!(op, opts, Enum.map(Keyword.keys(@build_defaults) ++ @process_keys, &{&1, nil}))
    name = opts[:name]

    unless is_atom(name) and name != nil,
      do: raise(ExBurn.Error.new(op, ":name must be an atom naming the serving, got #{inspect(name)}"))

    serving =
      case serving_or_model do
        %Nx.Serving{} = serving ->
          serving!(op, serving, opts)

        model_or_struct ->
          build(model_or_struct, for({key, _} <- @build_defaults, opts[key] != nil, do: {key, opts[key]}))
      end

    if serving.module == ExBurn.Serving.Server and serving.arg.example == nil do
      raise ExBurn.Error.new(
              op,
              "a started serving needs the example's shape: give :shape to build/2 or supervise/2",
              "the model has no input shape to take it from"
            )
    end

    process =
      for key <- [:batch_timeout, :shutdown, :hibernate_after, :spawn_opt], opts[key] != nil, do: {key, opts[key]}

    spec = Nx.Serving.child_spec([serving: serving, name: name] ++ process)

    case opts[:supervisor] do
      nil -> spec
      sup -> start_child(sup, spec)
    end
  end

  defp start_child(sup, spec) do
    pid = GenServer.whereis(sup)

    # A DynamicSupervisor's state is its struct (its initial call reads as a supervisor's).
    if pid && match?(%DynamicSupervisor{}, :sys.get_state(pid)),
      do: DynamicSupervisor.start_child(sup, spec),
      else: Supervisor.start_child(sup, spec)
  end

  defp serving!(op, serving, opts) do
    for key <- [:shape, :type, :device, :partitions, :padding], opts[key] != nil do
      raise ExBurn.Error.new(op, "#{inspect(key)} is an option of build/2; the serving given is built already")
    end

    case {opts[:batch_size], serving.batch_size} do
      {nil, _} ->
        serving

      {same, same} ->
        serving

      {asked, built} ->
        raise ExBurn.Error.new(
                op,
                ":batch_size #{inspect(asked)} differs from the serving's #{inspect(built)}",
                "build the serving with the batch size"
              )
    end
  end

  ## Client side

  @doc false
  # A request's rows go with their numbers, 0 to n - 1 (on the host); the inputs stay where
  # they are (the partition builds its batch on its device: ExBurn.Serving.Batch).
  def preprocess(%Nx.Tensor{shape: shape} = t, example) when tuple_size(shape) > 0 do
    t = check_example!(t, Tuple.delete_at(shape, 0), example, "the batch", shape)
    {Nx.Batch.concatenate([{t, row_numbers(elem(shape, 0))}]), :batch}
  end

  def preprocess(%Nx.Tensor{} = t, _example),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Serving.run",
          "a tensor input is a batch and needs a first axis of examples; give a list [example] for one example",
          "got a tensor #{Nx.Type.to_string(t.type)} #{inspect(t.shape)}"
        )
      )

  def preprocess([_ | _] = examples, example) do
    examples =
      examples
      |> Enum.with_index()
      |> Enum.map(fn
        {%Nx.Tensor{} = t, i} ->
          check_example!(t, t.shape, example, "example #{i}", t.shape)

        {other, i} ->
          raise ExBurn.Error.new(
                  "ExBurn.Serving.run",
                  "a list input holds example tensors; element #{i} is not one",
                  "got #{inspect(other, limit: 3)}"
                )
      end)

    shapes = examples |> Enum.map(& &1.shape) |> Enum.uniq()

    if length(shapes) > 1 or length(Enum.uniq_by(examples, & &1.type)) > 1 do
      raise ExBurn.Error.new(
              "ExBurn.Serving.run",
              "the examples of a list must share one shape and type",
              "shapes #{inspect(shapes)}"
            )
    end

    numbered = Enum.with_index(examples, fn t, i -> {t, Nx.tensor(i, type: :s32, backend: Nx.BinaryBackend)} end)

    {Nx.Batch.stack(numbered), {:examples, length(examples)}}
  end

  def preprocess(%Nx.Batch{template: template, size: size} = batch, example) do
    if example && not Nx.compatible?(template, example) do
      raise ExBurn.Error.new(
              "ExBurn.Serving.run",
              "the Nx.Batch's examples don't match the serving's",
              "batch of #{inspect(template)}, serving's example #{inspect(example)}"
            )
    end

    # Its rows, as one container (its padding rows left out), numbered as a tensor's.
    rows =
      (&Function.identity/1)
      |> Nx.Defn.jit_apply([batch], compiler: Nx.Defn.Evaluator)
      |> Composite.traverse(&Nx.slice_along_axis(&1, 0, size, axis: 0))

    {Nx.Batch.concatenate([{rows, row_numbers(size)}]), :batch}
  end

  def preprocess(other, _example),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Serving.run",
          "the input must be a batch tensor, a list of example tensors or an Nx.Batch",
          "got #{inspect(other, limit: 3)}"
        )
      )

  # An example (or a batch's example part) against the serving's example: the shape must
  # match; the type is cast.
  defp check_example!(t, _example_shape, nil, _what, _shape), do: t

  defp check_example!(t, shape, %Nx.Tensor{shape: shape, type: type}, _what, _full),
    do: if(t.type == type, do: t, else: Nx.as_type(t, type))

  defp check_example!(t, _example_shape, %Nx.Tensor{shape: want}, what, full) do
    raise ExBurn.Error.new(
            "ExBurn.Serving.run",
            "#{what} has shape #{inspect(full)}; the serving's examples have shape #{inspect(want)}",
            "a batch is {n, #{want |> Tuple.to_list() |> Enum.join(", ")}}, an example #{inspect(want)}; got #{Nx.Type.to_string(t.type)} #{inspect(full)}"
          )
  end

  @doc false
  def postprocess({{output, rows}, _metadata}, :batch), do: in_order(output, rows)

  def postprocess({{output, rows}, _metadata}, {:examples, n}) do
    output = in_order(output, rows)
    for i <- 0..(n - 1), do: Composite.traverse(output, &Nx.squeeze(Nx.slice_along_axis(&1, i, 1, axis: 0), axes: [0]))
  end

  # A request's rows' numbers, 0 to n - 1, on the host.
  defp row_numbers(n), do: Nx.iota({n}, type: :s32, backend: Nx.BinaryBackend)

  # The outputs' rows in the order of the request's: `rows` gives the row number of each (in
  # order, unless the parts of a request split over two batches came back in another order).
  defp in_order(output, %Nx.Tensor{shape: {n}}) when n <= 1, do: output

  defp in_order(output, rows) do
    order = Nx.to_flat_list(rows)

    if order == Enum.to_list(0..(length(order) - 1)) do
      output
    else
      positions = order |> Enum.with_index() |> Enum.sort() |> Enum.map(&elem(&1, 1))
      Composite.traverse(output, &Nx.take(&1, Nx.tensor(positions, type: :s32, backend: backend_of(&1)), axis: 0))
    end
  end

  defp backend_of(%Nx.Tensor{data: %ExBurn.Backend{device: dev}}), do: {ExBurn.Backend, device: dev}
  defp backend_of(%Nx.Tensor{data: %backend{}}), do: backend

  ## Helpers

  # Tensors (in containers, lists of them, Nx.Batch) copied to Nx.BinaryBackend: what
  # crosses to another node.
  @doc false
  def to_host(list) when is_list(list), do: Enum.map(list, &to_host/1)
  # An Nx.Batch holds closures over its entries: it is sent as it is (build it of host tensors).
  def to_host(%Nx.Batch{} = batch), do: batch
  def to_host(other), do: Composite.traverse(other, &host_copy/1)

  defp host_copy(%Nx.Tensor{data: %Nx.BinaryBackend{}} = t), do: t
  defp host_copy(%Nx.Tensor{} = t), do: Nx.backend_copy(t, Nx.BinaryBackend)
  defp host_copy(number) when is_number(number), do: number

  defp on_device(container, dev) do
    Composite.traverse(container, fn
      %Nx.Tensor{data: %ExBurn.Backend{device: ^dev}} = t -> t
      t -> Nx.backend_copy(t, {ExBurn.Backend, device: dev})
    end)
  end

  defp options!(op, opts, defaults), do: ExBurn.Options.validate!(op, opts, defaults)
end
