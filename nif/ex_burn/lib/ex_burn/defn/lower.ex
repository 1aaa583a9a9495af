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

  defstruct [:dev, :frame, :precision, blocks: %{}, next_block: 0, consts: [], const_count: 0, const_keys: %{}, hooks: [], calls: [], host: %{}, host_keys: %{}, tensor_ids: %{}]

  @creation_ops [:eye, :iota]

  # Constant folding: an integer op whose inputs are all constants, with a result of at most
  # @fold_max elements, is computed here (by Nx.BinaryBackend, whose integer arithmetic gives
  # the very bits of our kernels: wrapping in the type, shifts by the width or more 0) and
  # becomes a constant of the program. Nx.Random's generator is made of such ops: its
  # counters, rotation amounts and iotas fold away, and what is left runs fused on the device.
  @fold_max 65_536
  @foldable [:negate, :bitwise_not, :abs, :sign, :add, :subtract, :multiply, :quotient, :remainder, :bitwise_and, :bitwise_or, :bitwise_xor] ++
              [:left_shift, :right_shift, :min, :max, :equal, :not_equal, :greater, :greater_equal, :less, :less_equal] ++
              [:logical_and, :logical_or, :logical_xor, :logical_not, :select, :clip] ++
              [:reshape, :squeeze, :transpose, :broadcast, :slice, :put_slice, :concatenate, :stack, :pad, :reverse] ++
              [:as_type, :bitcast, :take, :take_along_axis, :gather, :iota, :eye]

  # A `while` whose predicate folds to a constant at every turn (a counter from a constant
  # against a constant bound, as in `while {i = 0, x}, i < 5`, or the form over a tensor of
  # known length, `while x, r <- tensor`) is unrolled: its body joins the block it is in, so
  # it is captured and replayed with everything around it and its elementwise chains fuse
  # across turns. At most @unroll_max turns and @unroll_instrs instructions of the block are
  # unrolled; the rest of such a loop runs as a loop.
  @unroll_max 64
  @unroll_instrs 4_000

  @doc false
  # `{blocks, consts, hooks, calls, outputs, scalars}` of the graph `expr` (a composite) over
  # `nparams` parameters on device `dev`: hooks are `{callback_spec, template}` by id, runtime
  # calls `{fun, opts, argument template, result template}` by id, `outputs` gives, for each
  # tensor of `expr` in order, the program output that holds it (a value that is more than
  # one output of the graph is one output of the program, so the results are one tensor),
  # and `scalars` the constants that hold one number everywhere (`Nx.broadcast(0, shape)` in
  # a gradient, say), `{type, number}` by constant index.
  def program(expr, nparams, dev, precision \\ nil) do
    st = %__MODULE__{dev: dev, precision: precision}
    params = for i <- 0..(nparams - 1)//1, do: {:param, i}
    {0, st} = in_block(st, params, Tree.scope_ids(expr), %{}, &lower_flat(expr, &1))
    {nparams, instrs, slots} = Map.fetch!(st.blocks, 0)
    unique = Enum.uniq(slots)
    index = Map.new(Enum.with_index(unique))
    blocks = [{nparams, instrs, unique} | for(b <- 1..(st.next_block - 1)//1, do: Map.fetch!(st.blocks, b))]
    scalars = for {{type, _shape, number}, {:const, c}} <- st.const_keys, into: %{}, do: {c, {type, number}}
    scalars = for {c, %T{} = host} <- st.host, Nx.size(host) == 1, into: scalars, do: {c, {host.type, host |> Nx.reshape({}) |> Nx.to_number()}}
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
  defp node(:tensor, %T{data: %Expr{id: id, args: [tensor]}}, st) do
    case st.tensor_ids do
      %{^id => slot} -> {slot, st}
      %{} -> tensor_const(tensor, st) |> then(fn {slot, st} -> {slot, %{st | tensor_ids: Map.put(st.tensor_ids, id, slot)}} end)
    end
  end
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

    case fold(op, t, args, st) do
      {:ok, slot, st} -> {slot, st}
      :error -> generic_call(op, t, args, st)
    end
  end

  defp generic_call(op, t, args, st) do
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
        {ns, st} = Enum.map_reduce(calls, st, fn {name, refs, opts}, st -> emit(st, {:op, name, refs, with_precision(name, opts, st.precision), label}) end)
        ns = List.to_tuple(ns)
        slots = for %T{data: %ExBurn.Backend{ref: ref}} <- List.flatten([result_list(result)]), do: resolve(ref, ns)
        {single(result, slots), st}

      {:default, _calls} ->
        :default
    end
  end

  # The program's precision for f32 products (the compiler's :precision option).
  defp with_precision(name, opts, precision) when name in ["nx_dot", "nx_conv"] and precision != nil, do: opts ++ [precision: precision]
  defp with_precision(_name, opts, _precision), do: opts

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
        st = if foldable_type?(type) and is_integer(number) and Nx.size(shape) <= @fold_max, do: put_host(st, slot, Nx.broadcast(Nx.tensor(number, type: type, backend: Nx.BinaryBackend), shape)), else: st
        {slot, %{st | const_keys: Map.put(st.const_keys, key, slot)}}
    end
  end

  defp tensor_const(%T{} = tensor, st) do
    {slot, st} =
      case tensor.data do
        %ExBurn.Backend{device: dev} when dev == st.dev -> add_const(tensor, st)
        _ -> add_const(Nx.backend_copy(tensor, {ExBurn.Backend, device: st.dev}), st)
      end

    if foldable_type?(tensor.type) and Nx.size(tensor) <= @fold_max,
      do: {slot, put_host(st, slot, Nx.backend_copy(tensor, Nx.BinaryBackend))},
      else: {slot, st}
  end

  defp put_host(st, {:const, c}, host), do: %{st | host: Map.put(st.host, c, host)}

  defp foldable_type?({kind, _}), do: kind in [:s, :u]
  defp foldable_type?(_), do: false

  # The constant that folds `op` on constant inputs, if it does (see @foldable).
  defp fold(op, t, args, st) do
    with true <- op in @foldable and foldable_type?(t.type) and Nx.size(t.shape) <= @fold_max,
         {:ok, host_args} <- host_args(args, st),
         call = if(op in @creation_ops, do: [t | host_args] ++ [[]], else: [t | host_args]),
         %T{} = value <- host_apply(op, call) do
      key = {value.type, value.shape, Nx.to_binary(value)}

      case st.host_keys do
        %{^key => slot} ->
          {:ok, slot, st}

        %{} ->
          {slot, st} = add_const(Nx.backend_copy(value, {ExBurn.Backend, device: st.dev}), st)
          st = put_host(st, slot, value)
          {:ok, slot, %{st | host_keys: Map.put(st.host_keys, key, slot)}}
      end
    else
      _ -> :error
    end
  end

  # An op that raises on the host (an index out of range, say) is left to the device, which
  # reports it as eager calls do.
  defp host_apply(op, call) do
    apply(Nx.BinaryBackend, op, call)
  rescue
    _ -> :error
  end

  # The arguments with every placeholder replaced by its constant's host value, where each
  # placeholder is a folded (integer) constant.
  defp host_args(args, st) do
    Enum.reduce_while(args, {:ok, []}, fn arg, {:ok, acc} ->
      case host_arg(arg, st) do
        {:ok, value} -> {:cont, {:ok, [value | acc]}}
        :error -> {:halt, :error}
      end
    end)
    |> case do
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      :error -> :error
    end
  end

  defp host_arg(%T{data: %ExBurn.Backend{ref: {:const, c}}}, st), do: Map.fetch(st.host, c)
  defp host_arg(%T{}, _st), do: :error

  defp host_arg(list, st) when is_list(list) do
    if Enum.any?(list, &match?(%T{}, &1)), do: host_args(list, st), else: {:ok, list}
  end

  defp host_arg(other, _st), do: {:ok, other}

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

  # A while: unrolled while its predicate folds (see @unroll_max), else the predicate and the
  # body are blocks over the loop state.
  defp while_node(%T{data: %Expr{args: [initial, _arg, pred, body]}} = t, st) do
    {state, st} = lower_flat(initial, st)
    unroll(t, state, pred, body, 0, st)
  end

  defp unroll(t, state, pred, body, turns, st) do
    with true <- turns < @unroll_max and st.frame.n < @unroll_instrs,
         {p, st_pred} = in_scope(st, state, Tree.scope_ids(pred), &lower(pred, &1)),
         {:ok, value} <- folded_number(p, st_pred) do
      if value == 0 do
        {unrolled(t, state), st_pred}
      else
        {state, st} = in_scope(st_pred, state, Tree.scope_ids(body), &lower_flat(body, &1))
        unroll(t, state, pred, body, turns + 1, st)
      end
    else
      _ -> loop(t, state, pred, body, st)
    end
  end

  defp folded_number({:const, c}, st) do
    case st.host do
      %{^c => %T{shape: {}} = value} -> {:ok, Nx.to_number(value)}
      %{} -> :error
    end
  end

  defp folded_number(_slot, _st), do: :error

  defp unrolled(%T{type: {:tuple, _}}, state), do: state
  defp unrolled(%T{}, [slot]), do: slot

  defp loop(%T{} = t, state, pred, body, st) do
    params = for i <- 0..(length(state) - 1)//1, do: {:param, i}

    case counter(pred, body) do
      {:ok, count_fun, i, type, bound} ->
        # A counter against a bound the body doesn't change: the trip count is computed once
        # on the device and read once (a repeat), instead of the predicate read every turn.
        {count, st} = trip_count(count_fun, {Enum.at(state, i), type}, bound, state, st)
        {bb, st} = in_block(st, params, Tree.scope_ids(body), %{}, &lower_flat(body, &1))

        {n, st} =
          case folded_number(count, st) do
            {:ok, times} -> emit(st, {:repeat, state, max(times, 0), bb})
            :error -> emit(st, {:repeat, [count | state], nil, bb})
          end

        {outputs(t, n), st}

      :error ->
        {pb, st} = in_block(st, params, Tree.scope_ids(pred), %{}, &lower_flat(pred, &1))
        {bb, st} = in_block(st, params, Tree.scope_ids(body), %{}, &lower_flat(body, &1))
        {n, st} = emit(st, {:while, state, pb, bb})
        {outputs(t, n), st}
    end
  end

  # `{:ok, count_fun, i, type, bound}` where the predicate compares state entry `i`, an integer
  # counter that the body steps by a constant towards the bound, with a bound the body
  # doesn't change (a constant, or state entry `{:param, j}` passed through): `count_fun` of
  # the counter's and the bound's values gives the number of turns.
  @flip %{less: :greater, less_equal: :greater_equal, greater: :less, greater_equal: :less_equal}

  defp counter(%T{data: %Expr{op: cmp, args: [a, b]}}, body) when is_map_key(@flip, cmp) do
    outs = Composite.flatten_list([body])

    with {:error, _} <- counter(cmp, a, b, outs),
         {:error, _} <- counter(@flip[cmp], b, a, outs) do
      :error
    end
  end

  defp counter(_pred, _body), do: :error

  defp counter(cmp, %T{data: %Expr{op: :parameter, args: [i]}, type: {kind, _} = type}, bound, outs) when kind in [:s, :u] do
    with {:ok, step} <- step(Enum.at(outs, i), i),
         true <- (cmp in [:less, :less_equal] and step > 0) or (cmp in [:greater, :greater_equal] and step < 0),
         {:ok, bound} <- invariant(bound, i, outs) do
      {:ok, count_fun(cmp, abs(step)), i, type, bound}
    else
      _ -> {:error, :no_counter}
    end
  end

  defp counter(_cmp, _a, _b, _outs), do: {:error, :no_counter}

  # The constant step of body output `out` for counter `i` (`i + c`, `c + i`, `i - c`).
  defp step(%T{data: %Expr{op: :add, args: [x, y]}}, i) do
    case {x, y} do
      {%T{data: %Expr{op: :parameter, args: [^i]}}, %T{data: %Expr{op: :constant, args: [c]}}} when is_integer(c) -> {:ok, c}
      {%T{data: %Expr{op: :constant, args: [c]}}, %T{data: %Expr{op: :parameter, args: [^i]}}} when is_integer(c) -> {:ok, c}
      _ -> :error
    end
  end

  defp step(%T{data: %Expr{op: :subtract, args: [%T{data: %Expr{op: :parameter, args: [i]}}, %T{data: %Expr{op: :constant, args: [c]}}]}}, i)
       when is_integer(c),
       do: {:ok, -c}

  defp step(_out, _i), do: :error

  defp invariant(%T{data: %Expr{op: :constant, args: [n]}}, _i, _outs) when is_integer(n), do: {:ok, {:number, n}}

  defp invariant(%T{data: %Expr{op: :parameter, args: [j]}, type: {kind, _} = type}, i, outs) when j != i and kind in [:s, :u] do
    case Enum.at(outs, j) do
      %T{data: %Expr{op: :parameter, args: [^j]}} -> {:ok, {:param, j, type}}
      _ -> :error
    end
  end

  defp invariant(_bound, _i, _outs), do: :error

  # The number of turns from the counter's start `i0` and the bound `n`, stepping by `s`.
  defp count_fun(cmp, s) do
    fn i0, n ->
      {i0, n} = {Nx.as_type(i0, :s64), Nx.as_type(n, :s64)}
      d = if cmp in [:less, :less_equal], do: Nx.subtract(n, i0), else: Nx.subtract(i0, n)

      if cmp in [:less, :greater],
        do: Nx.max(Nx.quotient(Nx.add(d, s - 1), s), 0),
        else: Nx.select(Nx.less(d, 0), 0, Nx.add(Nx.quotient(d, s), 1))
    end
  end

  # The trip count's slot: `count_fun` lowered on the counter's slot and the bound's.
  defp trip_count(count_fun, {i0, type}, bound, state, st) do
    {bound_slot, bound_type, st} =
      case bound do
        {:number, n} -> with({slot, st} <- constant(Nx.template({}, {:s, 64}), n, st), do: {slot, {:s, 64}, st})
        {:param, j, type} -> {Enum.at(state, j), type, st}
      end

    expr = Nx.Defn.debug_expr(count_fun).(Nx.template({}, type), Nx.template({}, bound_type))
    in_scope(st, [i0, bound_slot], Tree.scope_ids(expr), &lower(expr, &1))
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
