defmodule ExBurn.Serving do
  @moduledoc """
  Batched inference of a model on the device: an `Nx.Serving` whose batches run through
  `ExBurn.Defn.Compiler` (one NIF call per batch).

      serving = ExBurn.Serving.build({model, model_state}, batch_size: 8)
      ExBurn.Serving.run(serving, Nx.tensor([[0.1, 0.2, 0.3]]))        # inline, in the caller

      children = [ExBurn.Serving.supervise(serving, name: MyModel, batch_timeout: 5)]
      Supervisor.start_link(children, strategy: :one_for_one)
      ExBurn.Serving.run(MyModel, Nx.tensor([[0.1, 0.2, 0.3]]))        # batched with other callers

  ## Models

    * `{axon_model, model_state}` - an `Axon` graph and its `Axon.ModelState` (or parameter
      map); predictions come from `Axon.build/2`'s predict function in `:inference` mode.
    * `%ExBurn.Model{}` - its `model` (an Axon graph) and `state`, as the tuple.
    * a function of one argument - called with a batch tensor (first axis: the examples), it
      returns a tensor or container of tensors whose first axis runs over the same examples.
      It is compiled as a `defn` would be, so it must be made of `Nx` calls.

  The parameters are copied to the serving's device once, at `build/2`.

  ## Inputs and outputs

    * a tensor is a **batch**: its first axis runs over the examples (`{n, features...}`, n
      >= 1); the result is the model's output for those `n` examples (first axis `n`).
    * a list of tensors is a list of single **examples** (each without the batch axis); the
      result is a list of the model's outputs, one per example, without the batch axis.
    * an `Nx.Batch` is run as it is; the result is as for a tensor.

  Inputs of any backend or device are copied to the serving's device in the caller. When the
  example's shape is known (the `:shape` option, or the Axon model's input shape), inputs are
  checked against it in the caller (an `ExBurn.Error` naming the shapes, before anything
  reaches the serving process) and cast to its `:type`.

  ## Batching

  A started serving (`supervise/2`) gathers the inputs of concurrent callers until
  `:batch_size` examples are waiting or `:batch_timeout` milliseconds have passed since the
  first, runs them as one batch, and gives each caller its own rows (`Nx.Serving` does the
  gathering and the splitting). An input larger than `:batch_size` is split over several
  batches; `run/2` on a serving struct splits the same way. Every batch is padded to
  `:batch_size` (the padding rows' results are dropped), so a serving runs one compiled
  program, of one shape, for every batch; with the example's shape known, that program is
  compiled when the serving starts.

  The model runs on one partition: concurrent batches queue for it.
  """

  @behaviour Nx.Serving

  alias Nx.Defn.Composite

  @build_defaults [batch_size: 16, batch_timeout: 10, shape: nil, type: nil, device: nil]
  @process_keys [:name, :supervisor, :shutdown, :hibernate_after, :spawn_opt]

  ## Building

  @doc """
  A serving of `model` (see the module documentation for models, inputs and outputs).

  ## Options

    * `:batch_size` - the examples of one batch (default `16`).
    * `:batch_timeout` - milliseconds a started serving waits for more callers before it runs
      a batch that isn't full (default `10`).
    * `:shape` - the shape of one example, without the batch axis (`{784}` for a batch
      `{n, 784}`). Default: the Axon model's input shape less its batch axis, where the model
      has a single input with a known shape; none for a function. Needed by `supervise/2`.
    * `:type` - the type of the examples (default `:f32`): inputs are cast to it. Only with a
      known shape.
    * `:device` - the device string, or `:cuda` / `:wgpu` / `:cpu` (default
      `ExBurn.default_device/0`).
  """
  @spec build(term(), keyword()) :: Nx.Serving.t()
  def build(model, opts \\ []) do
    op = "ExBurn.Serving.build"
    opts = options!(op, opts, @build_defaults)
    batch_size = opts[:batch_size]
    timeout = opts[:batch_timeout]

    unless is_integer(batch_size) and batch_size > 0,
      do: raise(ExBurn.Error.new(op, ":batch_size must be a positive integer, got #{inspect(batch_size)}"))

    unless is_integer(timeout) and timeout >= 0,
      do:
        raise(
          ExBurn.Error.new(op, ":batch_timeout must be a non-negative integer of milliseconds, got #{inspect(timeout)}")
        )

    dev = ExBurn.device_spec(opts[:device] || ExBurn.default_device())
    {fun, params, model_shape} = model!(op, model)
    example = example!(op, opts[:shape] || model_shape, opts[:type])
    params = if params, do: on_device(params, dev)

    arg = %{fun: fun, params: params, example: example, batch_size: batch_size, device: dev}

    Nx.Serving.new(__MODULE__, arg, compiler: ExBurn.Defn.Compiler, device: dev)
    |> Nx.Serving.batch_size(batch_size)
    |> Nx.Serving.process_options(batch_timeout: timeout)
    |> Nx.Serving.client_preprocessing(&preprocess(&1, example, dev))
    |> Nx.Serving.client_postprocessing(&postprocess/2)
  end

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
  Runs `input` (a batch tensor, a list of example tensors, or an `Nx.Batch`) on a serving:
  inline in this process for a `%Nx.Serving{}`, through the started serving for a name
  (`Nx.Serving.batched_run/2`, batched with other callers). See the module documentation
  for what comes back.
  """
  @spec run(Nx.Serving.t() | atom() | {:local | :distributed, atom()}, term()) :: term()
  def run(%Nx.Serving{} = serving, input), do: Nx.Serving.run(serving, input)

  def run(name, input) when is_atom(name) or (is_tuple(name) and elem(name, 0) in [:local, :distributed]),
    do: Nx.Serving.batched_run(name, input)

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
  `:supervisor`, the serving started under that supervisor (`Supervisor.start_child/2`'s
  answer). `serving_or_model` is a serving of `build/2` or a model, built here with the
  options of `build/2`.

  ## Options

    * `:name` - an atom, the name to `run/2` with (required).
    * `:supervisor` - a supervisor to start the serving under now.
    * `:batch_size`, `:batch_timeout`, `:shape`, `:type`, `:device` - as `build/2` (for a
      serving struct, `:batch_timeout` overrides its own, and `:batch_size` must agree with it).
    * `:shutdown`, `:hibernate_after`, `:spawn_opt` - as `Nx.Serving.start_link/1`.

  The example's shape must be known (so that a caller's bad input fails in the caller, not in
  the batch it would share with others).
  """
  @spec supervise(Nx.Serving.t() | term(), keyword()) :: Supervisor.child_spec() | Supervisor.on_start_child()
  def supervise(serving_or_model, opts) do
    op = "ExBurn.Serving.supervise"
    opts = options!(op, opts, Enum.map(Keyword.keys(@build_defaults) ++ @process_keys, &{&1, nil}))
    name = opts[:name]

    unless is_atom(name) and name != nil,
      do: raise(ExBurn.Error.new(op, ":name must be an atom naming the serving, got #{inspect(name)}"))

    serving =
      case serving_or_model do
        %Nx.Serving{} = serving -> serving!(op, serving, opts)
        model -> build(model, for({key, _} <- @build_defaults, opts[key] != nil, do: {key, opts[key]}))
      end

    if serving.module == __MODULE__ and serving.arg.example == nil do
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
      sup -> Supervisor.start_child(sup, spec)
    end
  end

  defp serving!(op, serving, opts) do
    for key <- [:shape, :type, :device], opts[key] != nil do
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

  ## Nx.Serving callbacks

  @impl true
  def init(_inline_or_process, arg, partitions) do
    funs = for defn_options <- partitions, do: batch_fun(arg, Keyword.delete(defn_options, :batch_keys))
    {:ok, Map.put(arg, :funs, List.to_tuple(funs))}
  end

  # A function of a padded batch. With the example known, the model is compiled here for
  # batches of :batch_size (a serving process compiles when it starts); without, it is
  # jitted and compiled on the first batch.
  defp batch_fun(%{fun: fun, params: params, example: example, batch_size: size}, defn_options) do
    args = if params, do: [params], else: []

    compiled =
      case example do
        nil ->
          Nx.Defn.jit(fun, defn_options)

        %Nx.Tensor{shape: shape, type: type} ->
          templates = Enum.map(args, &Nx.to_template/1) ++ [Nx.template(Tuple.insert_at(shape, 0, size), type)]
          Nx.Defn.compile(fun, templates, defn_options)
      end

    fn batch -> apply(compiled, args ++ [batch]) end
  end

  @impl true
  def handle_batch(%Nx.Batch{size: size} = batch, partition, state) do
    padded = Nx.Batch.pad(batch, max(state.batch_size - size, 0))
    fun = elem(state.funs, partition)
    {:execute, fn -> {check_output!(fun.(padded), state.batch_size), %{size: size, device: state.device}} end, state}
  end

  defp check_output!(output, rows) do
    Composite.traverse(output, fn
      %Nx.Tensor{shape: shape} = t when tuple_size(shape) > 0 and elem(shape, 0) == rows ->
        t

      t ->
        raise ExBurn.Error.new(
                "ExBurn.Serving",
                "the model's outputs must keep the batch axis first: a batch of #{rows} gave #{inspect(Nx.shape(t))}",
                "output #{inspect(output)}"
              )
    end)
  end

  ## Client side

  @doc false
  def preprocess(%Nx.Tensor{shape: shape} = t, example, dev) when tuple_size(shape) > 0 do
    t = check_example!(t, Tuple.delete_at(shape, 0), example, "the batch", shape)
    {Nx.Batch.concatenate([on_device(t, dev)]), :batch}
  end

  def preprocess(%Nx.Tensor{} = t, _example, _dev),
    do:
      raise(
        ExBurn.Error.new(
          "ExBurn.Serving.run",
          "a tensor input is a batch and needs a first axis of examples; give a list [example] for one example",
          "got a tensor #{Nx.Type.to_string(t.type)} #{inspect(t.shape)}"
        )
      )

  def preprocess([_ | _] = examples, example, dev) do
    examples =
      examples
      |> Enum.with_index()
      |> Enum.map(fn
        {%Nx.Tensor{} = t, i} ->
          on_device(check_example!(t, t.shape, example, "example #{i}", t.shape), dev)

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

    {Nx.Batch.stack(examples), {:examples, length(examples)}}
  end

  def preprocess(%Nx.Batch{template: template} = batch, example, _dev) do
    if example && not Nx.compatible?(template, example) do
      raise ExBurn.Error.new(
              "ExBurn.Serving.run",
              "the Nx.Batch's examples don't match the serving's",
              "batch of #{inspect(template)}, serving's example #{inspect(example)}"
            )
    end

    {batch, :batch}
  end

  def preprocess(other, _example, _dev),
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
  def postprocess({output, _metadata}, :batch), do: output

  def postprocess({output, _metadata}, {:examples, n}),
    do:
      for(
        i <- 0..(n - 1),
        do: Composite.traverse(output, &Nx.squeeze(Nx.slice_along_axis(&1, i, 1, axis: 0), axes: [0]))
      )

  ## Helpers

  defp on_device(container, dev) do
    Composite.traverse(container, fn
      %Nx.Tensor{data: %ExBurn.Backend{device: ^dev}} = t -> t
      t -> Nx.backend_copy(t, {ExBurn.Backend, device: dev})
    end)
  end

  defp options!(op, opts, defaults), do: ExBurn.Options.validate!(op, opts, defaults)
end
