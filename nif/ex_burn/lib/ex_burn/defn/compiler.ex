defmodule ExBurn.Defn.Compiler do
  @moduledoc """
  An `Nx.Defn.Compiler` that runs a whole `defn` graph in one NIF call.

      Nx.Defn.global_default_options(compiler: ExBurn.Defn.Compiler)
      fun = Nx.Defn.jit(&MyModel.predict/2, compiler: ExBurn.Defn.Compiler)
      compiled = Nx.Defn.compile(&MyModel.predict/2, [params, Nx.template({64, 784}, :f32)], compiler: ExBurn.Defn.Compiler)

  The graph is lowered once per input templates (shapes, types) into a program: instructions
  over the same op-table entries that `ExBurn.Backend`'s callbacks run, with the same options,
  so a compiled function computes what the eager one computes. The NIF captures the program's
  launches as an ExCubecl pipeline on its first run and replays them on every later call: a
  call of a compiled function costs one NIF call and none of the ops' host-side work. `cond`
  and `while` run in Rust, their predicates read from the device, without coming back to
  Elixir. Hooks (`Nx.Defn.Kernel.hook/3`, tokens) run their Elixir functions with the hooked
  values after the call, in the order they happened (once per turn of a loop).
  `Nx.runtime_call/4` runs its Elixir function in the middle of the run, with the values of
  that moment: a program with runtime calls runs on a thread of its own, which waits while
  Elixir computes each call, and each call costs one more NIF call.

  Programs are cached per function, input templates and device. A cached program keeps the
  buffers of its captured launches (every intermediate of the graph) between calls, which is
  what makes a replay allocate nothing; so the cache is bounded (the application env
  `:defn_cache_size` of `:ex_burn`, default 64 programs; the oldest goes first), and
  `clear_cache/0` empties it. A process that calls the same function again (a training loop)
  runs the program it ran last without looking it up, as long as the cache has dropped
  nothing since.

  ## Options

    * `:device` - a device string of `ExCubecl.devices/0` or `:cuda` / `:wgpu` / `:cpu`
      (default: `ExBurn.default_device/0`). Inputs on another device or backend are copied to
      it as part of the call; results are `ExBurn.Backend` tensors on it.
    * `:hooks` - a map of hook name to function, overriding named hooks at call time (as in
      `Nx.Defn.Evaluator`), without recompiling.
    * `:cache` - `false` compiles on every call and caches nothing (default `true`).
    * `:fuse` - `false` runs every elementwise op as a launch of its own. By default (the
      application env `:defn_fuse` of `:ex_burn`, default `true`) each chain of elementwise
      float ops of one type and shape (`add`, `multiply`, `exp`, `tanh`, `max`, ...: an
      optimizer's update, an activation and its gradient) runs as one fused kernel, which
      gives the very bits the separate launches give. (Either way, an op that the graph
      computes twice on the same inputs, as gradients often do, runs once.)
    * `:client` and `:device_id` - EXLA's way of naming a device: `client: :cuda,
      device_id: 1` is `"cuda:1"`, `client: :host` is Mesa's lavapipe (`"wgpu:cpu"`).
    * `:max_concurrency` - the partitions of an `Nx.Serving` (default 1).
    * `:precision` - EXLA's: how f32 matrix products and convolutions of this function
      compute: `:highest` in exact f32 arithmetic, `:high` or `:default` on TF32 matrix
      units where the device has them (NVIDIA Ampere and later; elsewhere exact either way).
      Without it, the process-wide choice holds (`EX_CUBECL_MATMUL_PRECISION`, default exact).
    * `:lazy_transfers` and `:debug` - EXLA's; accepted so that EXLA code runs unchanged, with
      no effect: inputs always transfer at the call.
    * `:batch_keys` (which `Nx.Serving` adds) and `Axon.build/2`'s `:mode`, `:seed`,
      `:print_values`, `:raise_on_none` and `:global_layer_options` (which Axon passes on to
      the compiler): accepted, with no effect here.

  An argument given as a template (`Nx.template/2`) is fine where the function never reads it
  (as in Axon's `init_fn.(Nx.template(...), state)`); where it does, the call raises Nx's
  `RuntimeError` ("cannot perform operations on a Nx.TemplateBackend tensor"), as with
  `Nx.Defn.Evaluator`.

  Any other option raises `ExBurn.Error` naming it.

  ## Scheduling

  A call runs its program in one NIF call. A program whose last run took less than
  250 µs of host time (the application env `:normal_scheduler_us` of `:ex_burn`; `0` turns
  this off) runs on the calling process's normal scheduler, as the BEAM allows for NIFs well
  under a millisecond: no hop to a dirty scheduler and back. A first run, a slower one, a
  program with runtime calls, an input of more than 64 KiB to upload, or a run of the same
  program in progress elsewhere goes to a dirty CPU scheduler.

  ## Not supported yet

    * `__shard_jit__/6` (sharding over an `Nx.Mesh`) raises `ExBurn.Error`.
  """
  @behaviour Nx.Defn.Compiler

  alias Nx.Defn.Composite
  alias Nx.Tensor, as: T
  alias ExBurn.Defn.{Cache, Cse, Fuse, Lower}
  alias ExCubecl.Native

  @options [:device, :hooks, :cache, :fuse, :client, :device_id, :max_concurrency, :lazy_transfers, :debug, :precision] ++
             [:batch_keys, :mode, :seed, :print_values, :raise_on_none, :global_layer_options]
  @on_queue {__MODULE__, :on_queue}
  @last {__MODULE__, :last}

  @doc "Drops every cached program (each is freed once no caller holds it)."
  @spec clear_cache() :: :ok
  def clear_cache, do: Cache.clear()

  @doc "The number of cached programs."
  @spec cache_size() :: non_neg_integer()
  def cache_size, do: Cache.size()

  @impl true
  def __jit__(key, vars, fun, args_list, opts), do: __compile__(key, vars, fun, opts).(args_list)

  @impl true
  def __compile__(key, vars, fun, opts) do
    opts = options!(opts)
    dev = device(opts)
    fuse = Keyword.get_lazy(opts, :fuse, fn -> Application.get_env(:ex_burn, :defn_fuse, true) end)
    precision = precision!(opts[:precision])
    compile = fn -> compile(vars, fun, dev, fuse, precision) end
    program = if Keyword.get(opts, :cache, true), do: cached(key, templates(vars), dev, {fuse, precision}, compile), else: compile.()
    hooks = Keyword.get(opts, :hooks, %{})
    fn args_list -> Enum.map(args_list, &run(program, &1, hooks)) end
  end

  @impl true
  def __partitions_options__(opts) do
    # One option list per device (`:max_concurrency` lists each, default 1), as EXLA gives one
    # per device of its client: the devices of a `device: [...]` list, the one device that
    # `:device` or `:client` names, or else every GPU of the default device's runtime (cuda:N,
    # or wgpu's hardware adapters), else the default device alone (lavapipe).
    devices =
      case {opts[:device], opts[:client]} do
        {[_ | _] = named, _} ->
          Enum.map(named, &ExBurn.device_spec/1)

        {nil, nil} ->
          default = ExBurn.default_device_spec()
          runtime = default |> String.split(":") |> hd()
          gpus = for %{kind: :gpu, device: d} <- ExCubecl.devices(), hd(String.split(d, ":")) == runtime, do: d
          if gpus == [], do: [default], else: gpus

        _one ->
          [device(opts)]
      end

    copies = Keyword.get(opts, :max_concurrency, 1)
    base = Keyword.drop(opts, [:device, :client, :device_id, :max_concurrency])
    for device <- devices, _copy <- 1..copies//1, do: Keyword.put(base, :device, device)
  end

  @impl true
  def __to_backend__(opts), do: {ExBurn.Backend, device: device(options!(opts))}

  @impl true
  def __shard_jit__(_key, _mesh, _vars, _fun, _args_list, _opts),
    do: raise(ExBurn.Error.new("ExBurn.Defn.Compiler", "sharding (Nx.Defn.shard_jit) is not supported yet", "compile with Nx.Defn.jit/2 or Nx.Defn.compile/3"))

  ## Compilation

  defp compile(vars, fun, dev, fuse, precision) do
    {expr, output} = vars |> fun.() |> Composite.traverse([], &{Nx.devectorize(&1), [Nx.to_template(&1) | &2]})
    params = vars |> Composite.flatten_list() |> Enum.map(&Nx.devectorize/1)
    {blocks, consts, hooks, calls, positions, scalars} = Lower.program(expr, length(params), dev, precision)
    blocks = Cse.blocks(blocks)
    blocks = if fuse, do: Fuse.blocks(blocks, scalars), else: blocks
    specs = Enum.map(params, &{ExBurn.Backend.device_shape(&1), ExBurn.Backend.device_type(&1, dev)})

    case Native.program_new(blocks, consts, specs, dev) do
      {:ok, ref} ->
        result = Composite.traverse(expr, &Nx.to_template/1)
        read = read_params(blocks)
        %{ref: ref, dev: dev, result: result, output: Enum.reverse(output), positions: positions, hooks: List.to_tuple(hooks), calls: List.to_tuple(calls), read: read, unread: unread_inputs(params, read, dev)}

      {:error, e} ->
        raise ExBurn.Error.from("ExBurn.Defn.Compiler", e)
    end
  end

  # The cached program of `key` (the jitted function) for `templates`. A loop calls one
  # function over and over (Axon.Loop.run its step): the process remembers the last one, and
  # while the very same function term comes with the same templates and the cache has dropped
  # nothing since, it runs that program without working out the cache key (which walks the
  # closures the function captured) or reading the cache's table.
  defp cached(key, templates, dev, fuse, compile) do
    generation = Cache.generation()

    case Process.get(@last) do
      {last, ^templates, ^dev, ^fuse, ^generation, program} when is_function(last) ->
        if :erts_debug.same(last, key), do: program, else: remember(key, templates, dev, fuse, compile, generation)

      _ ->
        remember(key, templates, dev, fuse, compile, generation)
    end
  end

  defp remember(key, templates, dev, fuse, compile, generation) do
    program = Cache.fetch({compact(key), templates, dev, fuse}, compile)
    Process.put(@last, {key, templates, dev, fuse, generation, program})
    program
  end

  # The indices of the parameters that the main block reads (nested blocks get theirs from it).
  defp read_params([{_n, instrs, outputs} | _]), do: params_in({instrs, outputs}, MapSet.new())

  defp params_in({:param, i}, acc) when is_integer(i), do: MapSet.put(acc, i)
  defp params_in(list, acc) when is_list(list), do: Enum.reduce(list, acc, &params_in/2)
  defp params_in(tuple, acc) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> params_in(acc)
  defp params_in(_other, acc), do: acc

  # A parameter that the program never reads is never realised (an Nx.LazyContainer's field,
  # a template): the run gets zeros of its shape, made once here, in its place.
  defp unread_inputs(params, read, dev) do
    for {t, i} <- Enum.with_index(params), not MapSet.member?(read, i), into: %{} do
      zeros = Nx.broadcast(Nx.tensor(0, type: t.type, backend: Nx.BinaryBackend), t.shape)
      {i, input(Nx.backend_copy(zeros, {ExBurn.Backend, device: dev}), dev)}
    end
  end

  defp templates(vars), do: Enum.map(vars, &Composite.traverse(&1, fn t -> Nx.to_template(t) end))

  # The cache key of `key` (the jitted function): a closure by its code and its environment,
  # with every expression in the environment by its id. A closure that returns a prebuilt
  # graph (as Nx.Defn.Graph's stages do) holds it in its environment, and an expression
  # shares its nodes: hashing or copying it as a term walks every path, exponentially many.
  defp compact(fun) when is_function(fun) do
    case Map.new(Function.info(fun)) do
      %{type: :local} = info -> {info.module, info.name, info.arity, info.new_uniq, compact(info.env)}
      _external -> fun
    end
  rescue
    _ -> fun
  end

  defp compact(%T{data: %Nx.Defn.Expr{id: id}, shape: shape, type: type}), do: {Nx.Defn.Expr, id, shape, type}
  defp compact(list) when is_list(list), do: Enum.map(list, &compact/1)
  defp compact(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> compact() |> List.to_tuple()
  defp compact(%_{} = struct), do: struct |> Map.from_struct() |> compact() |> Map.put(:__struct__, struct.__struct__)
  defp compact(%{} = map), do: Map.new(map, fn {k, v} -> {k, compact(v)} end)
  defp compact(other), do: other

  ## Running

  defp run(program, args, runtime_hooks) do
    inputs =
      args
      |> Enum.with_index()
      |> Enum.map(fn {arg, i} ->
        case program.unread do
          %{^i => zeros} -> zeros
          %{} -> param_input(arg.(), i, program)
        end
      end)

    if Process.get(@on_queue) && tuple_size(program.calls) == 0,
      do: on_queue(program, inputs, runtime_hooks),
      else: step(run_now(program.ref, inputs), program, runtime_hooks)
  end

  defp run_now(ref, inputs) do
    case Application.get_env(:ex_burn, :normal_scheduler_us, 250) do
      0 -> Native.program_run(ref, inputs)
      max_us -> with {:ok, :dirty} <- Native.program_run_normal(ref, inputs, max_us), do: Native.program_run(ref, inputs)
    end
  end

  @doc false
  # Makes this process's compiled calls run on the device's command queue (ExBurn.async/3):
  # the NIF queues the run and returns, and the process waits for the queue's message.
  def run_on_queue, do: Process.put(@on_queue, true)

  defp on_queue(program, inputs, runtime_hooks) do
    case Native.program_submit(program.ref, inputs) do
      {:ok, id} ->
        receive do
          {:ex_cubecl, ^id, {:ok, {outputs, events}}} -> step({:ok, {:done, outputs, events}}, program, runtime_hooks)
          {:ex_cubecl, ^id, {:error, e}} -> step({:error, e}, program, runtime_hooks)
        end

      error ->
        step(error, program, runtime_hooks)
    end
  end

  defp step({:ok, {:done, outputs, events}}, program, runtime_hooks) do
    Enum.each(events, &run_hook(&1, program, runtime_hooks))
    result(program, outputs)
  end

  # A runtime call: the run waits in the NIF for its results.
  defp step({:ok, {:call, id, refs, events, session}}, program, runtime_hooks) do
    results =
      try do
        Enum.each(events, &run_hook(&1, program, runtime_hooks))
        runtime_call(elem(program.calls, id), refs, program.dev)
      catch
        kind, reason ->
          Native.program_abort(session)
          :erlang.raise(kind, reason, __STACKTRACE__)
      end

    step(Native.program_resume(session, results), program, runtime_hooks)
  end

  defp step({:error, e}, _program, _runtime_hooks), do: raise(ExBurn.Error.from(e.op, e))

  defp runtime_call({fun, opts, arg_template, template}, refs, dev) do
    {args, []} = Composite.traverse(arg_template, refs, fn t, [ref | refs] -> {%{t | data: %ExBurn.Backend{ref: ref, device: dev}}, refs} end)
    result = fun.(args, opts)

    unless Nx.compatible?(template, result) do
      raise ExBurn.Error.new("Nx.runtime_call", "the function's result doesn't match the output template", "expected #{inspect(template)}, got #{inspect(result)}")
    end

    for t <- Composite.flatten_list([result]), do: input(Nx.to_tensor(t), dev)
  end

  # A template argument that the program reads raises Nx's own error (as Nx.Defn.Evaluator
  # does) when its data is asked for.
  defp param_input(t, _i, program), do: input(t, program.dev)

  defp input(%T{} = t, dev) do
    t = Nx.devectorize(t)

    case t.data do
      %ExBurn.Backend{ref: ref, device: ^dev} -> ref
      _ -> ExBurn.Backend.device_input(t, dev)
    end
  end

  defp result(program, refs) do
    refs = List.to_tuple(refs)

    {result, {[], []}} =
      Composite.traverse(program.result, {program.positions, program.output}, fn _t, {[k | ks], [out | outs]} ->
        {%{out | data: %ExBurn.Backend{ref: elem(refs, k), device: program.dev}}, {ks, outs}}
      end)

    result
  end

  defp run_hook({id, refs}, program, runtime_hooks) do
    {spec, template} = elem(program.hooks, id)

    case hook_fun(spec, runtime_hooks) do
      nil ->
        :ok

      fun ->
        {value, []} = Composite.traverse(template, refs, fn t, [ref | refs] -> {%{t | data: %ExBurn.Backend{ref: ref, device: program.dev}}, refs} end)
        fun.(value)
    end
  end

  defp hook_fun({:fn, fun}, _hooks), do: fun
  defp hook_fun({:named, name, callback}, hooks), do: hooks[name] || callback

  ## Options

  defp precision!(nil), do: nil
  defp precision!(:highest), do: "exact"
  defp precision!(p) when p in [:high, :default], do: "tf32"

  defp precision!(other),
    do: raise(ExBurn.Error.new("ExBurn.Defn.Compiler", "option :precision must be :default, :high or :highest", "got #{inspect(other)}"))

  defp options!(opts) do
    case Enum.reject(Keyword.keys(opts), &(&1 in @options)) do
      [] -> opts
      unknown -> raise ExBurn.Error.new("ExBurn.Defn.Compiler", "unknown option(s) #{Enum.map_join(unknown, ", ", &inspect/1)}", "options: #{Enum.map_join(@options, ", ", &inspect/1)}")
    end
  end

  defp device(opts) do
    cond do
      dev = opts[:device] -> ExBurn.device_spec(dev)
      opts[:client] == :cuda -> "cuda:#{opts[:device_id] || 0}"
      opts[:client] == :host -> "wgpu:cpu"
      client = opts[:client] -> raise ExBurn.Error.new("ExBurn.Defn.Compiler", "unknown client #{inspect(client)}", "clients: :cuda, :host; or give :device")
      true -> ExBurn.default_device_spec()
    end
  end
end
