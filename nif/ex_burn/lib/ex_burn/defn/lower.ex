defmodule ExBurn.Defn.Lower do
  @moduledoc false
  # Lowers an `Nx.Defn.Expr` graph to a program of the NIF (`program_new/4`; the format is
  # documented in native/ex_cubecl_nif/src/program/mod.rs): blocks of instructions over slots
  # (`{:param, i}`, `{:value, instruction, output}`, `{:const, c}`).
  #
  # Every backend op is lowered by calling ExBurn.Backend's own callback on placeholder
  # tensors whose refs are slots, while ExBurn.Defn.Recorder records the one NIF entry the
  # callback runs instead of running it. Constants and the graph's own tensors become the
  # program's constants, uploaded once here. `cond` branches and `while` predicates and bodies
  # become blocks of their own, run by the NIF; a block that ExBurn.Backend doesn't run
  # natively lowers its default implementation in place. Scopes follow Nx.Defn.Evaluator: a
  # node that `Nx.Defn.Tree.scope_ids/2` places in the enclosing scope is computed there and
  # passed into the branches that read it.

  alias Nx.Defn.{Composite, Expr, Tree}
  alias Nx.Tensor, as: T
  alias ExBurn.Defn.Recorder

  defstruct [:dev, :frame, blocks: %{}, next_block: 0, consts: [], const_count: 0, const_keys: %{}, hooks: [], calls: []]

  @creation_ops [:eye, :iota]

  @doc false
  # `{blocks, consts, hooks, calls, outputs, scalars}` of the graph `expr` (a composite) over
  # `nparams` parameters on device `dev`: hooks are `{callback_spec, template}` by id, runtime
  # calls `{fun, opts, argument template, result template}` by id, `outputs` gives, for each
  # tensor of `expr` in order, the program output that holds it (a value that is more than
  # one output of the graph is one output of the program, so the results are one tensor),
  # and `scalars` the constants that hold one number everywhere (`Nx.broadcast(0, shape)` in
  # a gradient, say), `{type, number}` by constant index.
  def program(expr, nparams, dev) do
    st = %__MODULE__{dev: dev}
    params = for i <- 0..(nparams - 1)//1, do: {:param, i}
    {0, st} = in_block(st, params, Tree.scope_ids(expr), %{}, &lower_flat(expr, &1))
    {nparams, instrs, slots} = Map.fetch!(st.blocks, 0)
    unique = Enum.uniq(slots)
    index = Map.new(Enum.with_index(unique))
    blocks = [{nparams, instrs, unique} | for(b <- 1..(st.next_block - 1)//1, do: Map.fetch!(st.blocks, b))]
    scalars = for {{type, _shape, number}, {:const, c}} <- st.const_keys, into: %{}, do: {c, {type, number}}
    {blocks, Enum.reverse(st.consts), Enum.reverse(st.hooks), Enum.reverse(st.calls), Enum.map(slots, &Map.fetch!(index, &1)), scalars}
  end

  ## Blocks and frames

  # Lowers a block with `fun` (which gives its output slots) in a frame of its own.
  defp in_block(st, params, scope, memo, fun) do
    id = st.next_block
    parent = st.frame
    frame = %{instrs: [], n: 0, memo: memo, scope: scope, params: params}
    {outputs, st} = fun.(%{st | next_block: id + 1, frame: frame})
    block = {length(params), Enum.reverse(st.frame.instrs), List.flatten([outputs])}
    {id, %{st | blocks: Map.put(st.blocks, id, block), frame: parent}}
  end

  # Lowers with `fun` in the current block but a scope of its own (a block's default
  # implementation: its parameters are the block's arguments).
  defp in_scope(st, params, scope, fun) do
    %{memo: memo, scope: outer_scope, params: outer_params} = st.frame
    {result, st} = fun.(%{st | frame: %{st.frame | memo: %{}, scope: scope, params: params}})
    {result, %{st | frame: %{st.frame | memo: memo, scope: outer_scope, params: outer_params}}}
  end

  defp emit(st, instr) do
    %{instrs: instrs, n: n} = st.frame
    {n, %{st | frame: %{st.frame | instrs: [instr | instrs], n: n + 1}}}
  end

  ## Nodes

  # The flat list of slots of a composite of expressions.
  defp lower_flat(composite, st) do
    {slots, st} = Enum.map_reduce(Composite.flatten_list([composite]), st, &lower/2)
    {List.flatten(slots), st}
  end

  # A node's slot, or its list of slots where it is a tuple.
  defp lower(%T{data: %Expr{op: :constant, args: [number]}} = t, st), do: constant(t, number, st)

  defp lower(%T{data: %Expr{id: id, op: op}} = t, st) do
    case st.frame.memo do
      %{^id => slot} ->
        {slot, st}

      %{} ->
        {slot, st} = node(op, t, st)
        {slot, %{st | frame: %{st.frame | memo: Map.put(st.frame.memo, id, slot)}}}
    end
  end

  defp node(:parameter, %T{data: %Expr{args: [i]}}, st), do: {Enum.fetch!(st.frame.params, i), st}
  defp node(:tensor, %T{data: %Expr{args: [tensor]}}, st), do: tensor_const(tensor, st)
  defp node(:elem, %T{data: %Expr{args: [tuple, i]}}, st), do: lower(tuple, st) |> then(fn {slots, st} -> {Enum.fetch!(slots, i), st} end)

  defp node(:metadata, %T{data: %Expr{args: [expr, _meta]}}, st) do
    case expr do
      %T{} -> lower(expr, st)
      _ -> lower_flat(expr, st)
    end
  end

  defp node(:cond, t, st), do: cond_node(t, st)
  defp node(:while, t, st), do: while_node(t, st)
  defp node(:hook, t, st), do: hook_node(t, st)
  defp node(:block, t, st), do: block_node(t, st)

  defp node(op, %T{data: %Expr{args: args}} = t, st) when op in [:reduce, :window_reduce] do
    fun = List.last(args)

    case associative(fun) do
      {:ok, name} ->
        generic(op, put_in(t.data.args, List.replace_at(args, -1, Function.capture(Nx, name, 2))), st)

      :error ->
        # Any other function: a loop that folds it element by element (ExBurn.Defn.Fold).
        # (built as defn builds graphs: numbers become constants of the graph)
        lower(Nx.with_default_backend(Nx.Defn.Expr, fn -> apply(ExBurn.Defn.Fold, op, [t]) end), st)
    end
  end

  defp node(:runtime_call, t, st), do: runtime_call_node(t, st)

  defp node(:fun, _t, _st),
    do: raise(ExBurn.Error.new("ExBurn.Defn.Compiler", "internal: an anonymous function outside reduce or window_reduce", ""))

  defp node(op, t, st), do: generic(op, t, st)

  # Any backend op: its tensor arguments become placeholders, and ExBurn.Backend's callback
  # runs on them with the NIF call recorded.
  defp generic(op, t, st) do
    {args, st} = Tree.apply_args(t, st, &placeholder/2)

    call =
      cond do
        op in @creation_ops -> [t | args] ++ [[device: st.dev]]
        match?({:tuple, _}, t.type) -> args
        true -> [t | args]
      end

    recorded(st, "Nx.#{op}", fn -> apply(ExBurn.Backend, op, call) end)
  end

  defp placeholder(%T{} = arg, st) do
    {slot, st} = lower(arg, st)
    {%{arg | data: %ExBurn.Backend{ref: slot, device: st.dev}}, st}
  end

  # Runs `fun` (a backend callback on placeholders) with recording on, emits the NIF calls it
  # made, and gives the slots of its result.
  defp recorded(st, label, fun) do
    case Recorder.record(fun) do
      {:ok, result, calls} ->
        {ns, st} = Enum.map_reduce(calls, st, fn {name, refs, opts}, st -> emit(st, {:op, name, refs, opts, label}) end)
        ns = List.to_tuple(ns)
        slots = for %T{data: %ExBurn.Backend{ref: ref}} <- List.flatten([result_list(result)]), do: resolve(ref, ns)
        {single(result, slots), st}

      {:default, _calls} ->
        :default
    end
  end

  defp result_list(%T{} = t), do: [t]
  defp result_list(tuple) when is_tuple(tuple), do: Tuple.to_list(tuple)

  defp single(%T{}, [slot]), do: slot
  defp single(_tuple, slots), do: slots

  defp resolve({:pending, j, k}, ns), do: {:value, elem(ns, j), k}
  defp resolve(slot, _ns), do: slot

  ## Constants

  defp constant(%T{type: type, shape: shape} = t, number, st) do
    key = {type, shape, number}

    case st.const_keys do
      %{^key => slot} ->
        {slot, st}

      %{} ->
        {slot, st} = add_const(ExBurn.Backend.constant(t, number, device: st.dev), st)
        {slot, %{st | const_keys: Map.put(st.const_keys, key, slot)}}
    end
  end

  defp tensor_const(%T{data: %ExBurn.Backend{device: dev}} = tensor, %{dev: dev} = st), do: add_const(tensor, st)
  defp tensor_const(tensor, st), do: add_const(Nx.backend_copy(tensor, {ExBurn.Backend, device: st.dev}), st)

  defp add_const(%T{data: %ExBurn.Backend{ref: ref}}, st) do
    {{:const, st.const_count}, %{st | consts: [ref | st.consts], const_count: st.const_count + 1}}
  end

  ## Control flow

  # A cond: the first predicate in this scope, each other predicate, body and the last
  # branch a block of its own, all taking the first predicate and the values of this scope
  # that any of them reads.
  defp cond_node(%T{data: %Expr{args: [[{pred, _} | _] = clauses, last]}} = t, st) do
    {pred0, st} = lower(pred, st)
    branches = Enum.with_index(clauses, fn {p, body}, i -> if i == 0, do: [body], else: [p, body] end) ++ [[last]]
    free = free_nodes(List.flatten(branches), st.frame.scope)
    {free_slots, st} = Enum.map_reduce(free, st, &lower/2)
    inputs = [pred0 | List.flatten(free_slots)]
    {memo, _} = Enum.zip(free, free_slots) |> Enum.reduce({%{}, 1}, &param_memo/2)
    params = for i <- 0..(length(inputs) - 1), do: {:param, i}
    scope = fn expr -> Tree.scope_ids(expr, st.frame.scope) end
    branch = fn st, expr -> in_block(st, params, scope.(expr), memo, &lower_flat(expr, &1)) end

    {blocks, st} =
      clauses
      |> Enum.with_index()
      |> Enum.map_reduce(st, fn
        {{_p, body}, 0}, st ->
          {pb, st} = in_block(st, params, %{}, %{}, &{[{:param, 0}], &1})
          {bb, st} = branch.(st, body)
          {{pb, bb}, st}

        {{p, body}, _}, st ->
          {pb, st} = branch.(st, p)
          {bb, st} = branch.(st, body)
          {{pb, bb}, st}
      end)

    {lb, st} = branch.(st, last)
    {n, st} = emit(st, {:cond, inputs, blocks, lb})
    {outputs(t, n), st}
  end

  # Maps each free node to the branch parameters that carry it (a tuple node: one each).
  defp param_memo({%T{data: %Expr{id: id}}, slots}, {memo, next}) when is_list(slots) do
    params = for k <- 0..(length(slots) - 1)//1, do: {:param, next + k}
    {Map.put(memo, id, params), next + length(slots)}
  end

  defp param_memo({%T{data: %Expr{id: id}}, _slot}, {memo, next}), do: {Map.put(memo, id, {:param, next}), next + 1}

  # The nodes of the enclosing scope (`scope`) that `exprs` read, in order: parameters always
  # (they are the enclosing function's), constants and tensors never (they are constants).
  defp free_nodes(exprs, scope) do
    {free, _seen} = Enum.reduce(exprs, {[], %{}}, fn expr, acc -> Composite.reduce(expr, acc, &collect_free(&1, &2, scope)) end)
    Enum.reverse(free)
  end

  defp collect_free(%T{data: %Expr{op: op}}, acc, _scope) when op in [:constant, :tensor], do: acc

  defp collect_free(%T{data: %Expr{id: id, op: op}} = t, {free, seen} = acc, scope) do
    cond do
      Map.has_key?(seen, id) ->
        acc

      op == :parameter or Map.has_key?(scope, id) ->
        {[t | free], Map.put(seen, id, true)}

      true ->
        {_, acc} = Tree.apply_args(t, :scope, {free, Map.put(seen, id, true)}, &{&1, collect_free(&1, &2, scope)})
        acc
    end
  end

  # A while: the predicate and the body are blocks over the loop state.
  defp while_node(%T{data: %Expr{args: [initial, _arg, pred, body]}} = t, st) do
    {state, st} = lower_flat(initial, st)
    params = for i <- 0..(length(state) - 1)//1, do: {:param, i}
    {pb, st} = in_block(st, params, Tree.scope_ids(pred), %{}, &lower_flat(pred, &1))
    {bb, st} = in_block(st, params, Tree.scope_ids(body), %{}, &lower_flat(body, &1))
    {n, st} = emit(st, {:while, state, pb, bb})
    {outputs(t, n), st}
  end

  defp outputs(%T{type: {:tuple, size}}, n), do: for(k <- 0..(size - 1)//1, do: {:value, n, k})
  defp outputs(%T{}, n), do: {:value, n, 0}

  ## Hooks

  # A hook passes its value through; the NIF hands the hooked value to Elixir as event `id`.
  defp hook_node(%T{data: %Expr{args: [expr, spec, template, _ref]}}, st) do
    {value, st} = lower_flat(expr, st)

    {hooked, callback, st} =
      case spec do
        {:token_hook, hooked_expr, inner} ->
          {slots, st} = lower_flat(hooked_expr, st)
          {{hooked_expr, slots}, inner, st}

        _ ->
          {{expr, value}, spec, st}
      end

    {hooked_expr, slots} = hooked
    id = length(st.hooks)
    st = %{st | hooks: [{callback, Composite.traverse(hooked_expr, &Nx.to_template/1)} | st.hooks]}
    {_n, st} = emit(st, {:hook, id, slots})

    case template do
      %T{} -> {hd(value), st}
      _ -> {value, st}
    end
  end

  ## Runtime calls

  # The NIF hands the arguments to Elixir (call `id`) and takes the results, which must match
  # the template: their stored shapes and types go with the instruction.
  defp runtime_call_node(%T{data: %Expr{args: [expr, fun, template, opts]}}, st) do
    {args, st} = lower_flat(expr, st)
    id = length(st.calls)
    arg_template = Composite.traverse(expr, &Nx.to_template/1)
    st = %{st | calls: [{fun, opts, arg_template, template} | st.calls]}
    outputs = for t <- Composite.flatten_list([template]), do: {ExBurn.Backend.device_shape(t), ExBurn.Backend.device_type(t, st.dev)}
    {n, st} = emit(st, {:call, id, args, outputs})

    case template do
      %T{} -> {{:value, n, 0}, st}
      _ -> {for(k <- 0..(length(outputs) - 1)//1, do: {:value, n, k}), st}
    end
  end

  ## Blocks

  # A block runs natively where ExBurn.Backend's block/4 does; elsewhere its default
  # implementation (traced over parameters standing for the block's tensor arguments) is
  # lowered in place.
  defp block_node(%T{data: %Expr{args: [struct, in_args, default, _callback]}} = t, st) do
    {tensors, opts} = Enum.split_while(in_args, &(not is_list(&1)))
    {args, st} = Enum.map_reduce(tensors, st, &placeholder/2)
    out = if match?({:tuple, _}, t.type), do: default, else: t
    fun = Recorder.default_fun(1 + length(in_args))

    case recorded(st, "Nx.block(#{inspect(struct.__struct__)})", fn -> ExBurn.Backend.block(struct, out, args ++ opts, fun) end) do
      :default ->
        slots = Enum.map(args, & &1.data.ref)
        in_scope(st, slots, Tree.scope_ids(default), fn st -> lower_default(default, st) end)

      lowered ->
        lowered
    end
  end

  defp lower_default(%T{} = default, st), do: lower(default, st)
  defp lower_default(default, st), do: lower_flat(default, st)

  ## Reduction functions

  @associative [:add, :multiply, :max, :min, :logical_and, :logical_or, :bitwise_and, :bitwise_or]

  # The Nx function of a two-argument `fun` node whose body is an associative op of its two
  # parameters.
  defp associative(%T{data: %Expr{op: :fun, args: [[a, b], body, _mfa]}}) do
    case body do
      %T{data: %Expr{op: op, args: [x, y]}} when op in @associative ->
        if Enum.sort([param_pos(x), param_pos(y)]) == Enum.sort([param_pos(a), param_pos(b)]) and param_pos(x) != param_pos(y),
          do: {:ok, op},
          else: :error

      _ ->
        :error
    end
  end

  defp associative(_), do: :error

  defp param_pos(%T{data: %Expr{op: :parameter, args: [i]}}), do: i
  defp param_pos(_), do: nil

end
