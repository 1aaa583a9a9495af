defmodule ExBurn.Defn.Fuse do
  @moduledoc false
  # Fuses a lowered program's chains of elementwise float ops, and of elementwise integer ops
  # (adds, shifts, xors: a counter-based random generator), into `nx_fused` instructions, one
  # launch each (the entry is documented in native/ex_cubecl_nif/src/ops/nx/fused.rs).
  #
  # Within a block, an elementwise op (`nx_add`, `nx_exp`, ...) joins the groups of the
  # fusable ops it reads that have its type and shape, merging them. A group whose value is
  # read by an instruction outside it (or by the block's outputs) before the group is complete
  # is closed: nothing joins it afterwards, so a group is computed at the place of its last
  # member and everything it reads is computed before that place. A group of two or more ops
  # becomes one instruction there, giving the values that outside instructions read. Each op
  # in the kernel gives the very bits its own entry gives: fusing changes launches, not
  # results. A comparison (u8) joins only where every reader is a `select` of its type and
  # shape that reads it as the predicate alone: in the kernel it is 1 or 0 of the group's
  # type, and a `select` outside the group reads such an output alike (non-zero is true).

  @unary ~w(exp expm1 log log1p sigmoid cos sin tan cosh sinh tanh acos asin atan acosh asinh atanh sqrt rsqrt cbrt erf erfc erf_inv abs ceil floor negate sign)
  @binary ~w(add subtract multiply divide pow atan2 max min)
  @compare ~w(equal not_equal greater greater_equal less less_equal)
  @float_types ~w(f16 bf16 f32 f64)
  @int_unary ~w(negate bitwise_not)
  @int_binary ~w(add subtract multiply bitwise_and bitwise_or bitwise_xor left_shift right_shift max min)
  # (narrower integers compute in 32 bits on some devices: their chains stay op by op)
  @int_types ~w(s32 s64 u32 u64)

  @doc false
  # The blocks of a program (`{nparams, instructions, outputs}`) with their chains fused.
  def blocks(blocks, scalars \\ %{}), do: Enum.map(blocks, &block(&1, scalars))

  defp block({nparams, instrs, outputs}, scalars) do
    instrs = List.to_tuple(instrs)
    n = tuple_size(instrs)
    groups = group(instrs, n, outputs, readers(instrs, n, outputs))
    {new_instrs, map} = emit(instrs, n, outputs, groups, scalars)
    outputs = Enum.map(outputs, &rename(&1, map))
    {nparams, stack_concats(new_instrs, outputs), outputs}
  end

  # An integer group whose outputs nothing reads but one `concatenate` of all of them, in order,
  # along the first axis (threefry's two halves) writes them stacked in one tensor: the
  # concatenation is then a view of it, and its launch is gone.
  defp stack_concats(instrs, outputs) do
    t = List.to_tuple(instrs)
    reads = Enum.frequencies(Enum.flat_map(instrs, &slots/1) ++ outputs)

    stacked =
      for {{:op, "nx_concatenate", [{:value, f, 0} | _] = ins, opts, _}, _i} <- Enum.with_index(instrs),
          {:op, "nx_fused", _, fopts, _} <- [elem(t, f)],
          opts[:axis] == 0 and to_string(fopts[:type]) in @int_types and fopts[:shape] != [],
          ins == for(k <- 0..(length(fopts[:outputs]) - 1)//1, do: {:value, f, k}),
          Enum.all?(ins, &(reads[&1] == 1)),
          into: %{},
          do: {f, opts[:shape]}

    Enum.map(Enum.with_index(instrs), fn
      {{:op, "nx_fused", ins, opts, label}, i} when is_map_key(stacked, i) ->
        {:op, "nx_fused", ins, Keyword.merge(opts, shape: stacked[i], stacked: true), label}

      {{:op, "nx_concatenate", [{:value, f, 0} | _], opts, label}, _i} when is_map_key(stacked, f) ->
        {:op, "nx_reshape", [{:value, f, 0}], [type: opts[:type], shape: opts[:shape]], label}

      {instr, _i} ->
        instr
    end)
  end

  ## Grouping

  # `%{member => group}` with each group's `%{members: [i, ...] (in order), closed: bool}`:
  # the fusable instructions that share a group.
  defp group(instrs, n, outputs, readers) do
    st = %{of: %{}, groups: %{}}

    st =
      Enum.reduce(0..(n - 1)//1, st, fn i, st ->
        instr = elem(instrs, i)

        case fusable(instr, readers[i] || [], instrs) do
          {:ok, key} -> join(st, i, key, instr)
          :error -> close_read(st, slots(instr))
        end
      end)

    st |> close_read(outputs) |> absorb_scalars(instrs, n, readers)
  end

  # A group of scalar ops (shape `{}`: a key's words, a step count) whose values only one
  # larger group of its type reads joins that group: each unit of the kernel computes the
  # scalars again, which costs a few instructions and saves their launches. Groups are taken
  # from the last, so that chains of scalar groups move in together.
  defp absorb_scalars(st, instrs, n, readers) do
    Enum.reduce((n - 1)..0//-1, st, fn i, st ->
      with g when g != nil <- st.of[i],
           %{key: {type, []}, members: members} <- st.groups[g],
           true <- List.last(members) == i,
           false <- Enum.any?(members, &compare?(elem(instrs, &1))),
           [target] <- reader_groups(st, members, readers),
           %{key: {^type, shape}} when shape != [] <- st.groups[target] do
        all = Enum.sort(st.groups[target].members ++ members)
        groups = st.groups |> Map.delete(g) |> Map.put(target, %{st.groups[target] | members: all})
        %{st | groups: groups, of: Enum.reduce(members, st.of, &Map.put(&2, &1, target))}
      else
        _ -> st
      end
    end)
  end

  defp compare?({:op, "nx_" <> name, _, _, _}), do: name in @compare

  # The groups that read `members` from outside them (`[:none]` where something else does).
  defp reader_groups(st, members, readers) do
    own = MapSet.new(members)

    members
    |> Enum.flat_map(&(readers[&1] || []))
    |> Enum.reject(fn {reader, _} -> MapSet.member?(own, reader) end)
    |> Enum.map(fn {reader, _} -> if is_integer(reader), do: st.of[reader] || :none, else: :none end)
    |> Enum.uniq()
  end

  # Instruction `i` (fusable, of `key` = {type, shape}) joins the open groups of the same key
  # among those it reads (merging them); the others it reads are closed.
  defp join(st, i, key, {:op, _, inputs, _, _}) do
    read = inputs |> Enum.flat_map(&group_read(st, &1)) |> Enum.uniq()
    {joined, other} = Enum.split_with(read, fn g -> st.groups[g].key == key and not st.groups[g].closed end)
    st = Enum.reduce(other, st, &close/2)
    members = joined |> Enum.flat_map(&st.groups[&1].members) |> Enum.sort()
    members = members ++ [i]
    groups = Map.drop(st.groups, joined) |> Map.put(i, %{key: key, members: members, closed: false})
    %{st | groups: groups, of: Enum.reduce(members, st.of, &Map.put(&2, &1, i))}
  end

  defp group_read(st, {:value, j, _}), do: List.wrap(st.of[j])
  defp group_read(_st, _slot), do: []

  defp close_read(st, slots), do: slots |> Enum.flat_map(&group_read(st, &1)) |> Enum.reduce(st, &close/2)

  defp close(g, st), do: put_in(st.groups[g].closed, true)

  # `{:ok, {type, shape}}` for an elementwise float op that the fused kernel computes exactly
  # as its own entry does; `readers` are the instructions (or `:out`) that read it.
  defp fusable({:op, "nx_" <> name, inputs, opts, _label} = instr, readers, instrs) do
    type = to_string(opts[:type])
    compute = to_string(opts[:compute])
    # (not complex tensors, nor narrow types: the kernel reads the stored values as they are)
    plain? = not Keyword.has_key?(opts, :complex) and not Keyword.has_key?(opts, :narrow)

    ok =
      case length(inputs) do
        1 -> (name in @unary and type in @float_types) or (name in @int_unary and type in @int_types)
        2 when name in @compare -> (compute in @float_types or compute in @int_types) and Enum.all?(readers, &predicate_of?(&1, instr, compute, instrs))
        2 -> compute == type and ((name in @binary and type in @float_types) or (name in @int_binary and type in @int_types))
        3 -> name == "select" and (type in @float_types or type in @int_types)
        _ -> false
      end

    cond do
      not (ok and plain?) -> :error
      name in @compare -> {:ok, {compute, opts[:shape]}}
      true -> {:ok, {type, opts[:shape]}}
    end
  end

  defp fusable(_instr, _readers, _instrs), do: :error

  # Whether instruction `reader` is a fusable `select` of `type` and `cmp`'s shape that reads
  # the comparison `cmp` (at `{:value, i, 0}`) as its predicate and nowhere else.
  defp predicate_of?({reader, i}, {:op, _, _, cmp_opts, _}, type, instrs) when is_integer(reader) do
    case elem(instrs, reader) do
      {:op, "nx_select", [pred | values], opts, _} ->
        pred == {:value, i, 0} and {:value, i, 0} not in values and to_string(opts[:type]) == type and opts[:shape] == cmp_opts[:shape] and
          not Keyword.has_key?(opts, :complex)

      _ ->
        false
    end
  end

  defp predicate_of?(_reader, _cmp, _type, _instrs), do: false

  # `%{i => [{reader, i}, ...]}`: who reads instruction `i`'s values (`reader` an index, or
  # `:out` for the block's outputs).
  defp readers(instrs, n, outputs) do
    from_instrs = for j <- 0..(n - 1)//1, {:value, i, _} <- slots(elem(instrs, j)), do: {i, {j, i}}
    from_outputs = for {:value, i, _} <- outputs, do: {i, {:out, i}}
    Enum.group_by(from_instrs ++ from_outputs, &elem(&1, 0), &elem(&1, 1))
  end

  # Every slot an instruction reads.
  defp slots({:op, _, inputs, _, _}), do: inputs
  defp slots({:cond, inputs, _, _}), do: inputs
  defp slots({:while, initial, _, _}), do: initial
  defp slots({:repeat, inputs, _, _}), do: inputs
  defp slots({:hook, _, inputs}), do: inputs
  defp slots({:call, _, inputs, _}), do: inputs

  ## Emitting

  # The new instruction list and the map from old instruction indices to where their values
  # went: `{:moved, new}` for an instruction kept, `{:fused, new, k}` for a group member that
  # is output `k` of fused instruction `new`.
  defp emit(instrs, n, outputs, %{groups: groups}, scalars) do
    multi = for {_, %{members: [_, _ | _]} = g} <- groups, do: g
    last = Map.new(multi, &{List.last(&1.members), &1})
    inside = multi |> Enum.flat_map(& &1.members) |> MapSet.new()
    read = read_by(instrs, n, outputs, multi)

    {out, _count, map} =
      Enum.reduce(0..(n - 1)//1, {[], 0, %{}}, fn i, {out, count, map} ->
        cond do
          g = last[i] ->
            {instr, given} = fused_instr(instrs, g, read, map, scalars)

            map =
              given |> Enum.with_index() |> Enum.reduce(map, fn {m, k}, map -> Map.put(map, m, {:fused, count, k}) end)

            {[instr | out], count + 1, map}

          MapSet.member?(inside, i) ->
            {out, count, map}

          true ->
            {[rename_instr(elem(instrs, i), map) | out], count + 1, Map.put(map, i, {:moved, count})}
        end
      end)

    {Enum.reverse(out), map}
  end

  # The group members that an instruction outside their group, or the block's outputs, read.
  defp read_by(instrs, n, outputs, multi) do
    group = for g <- multi, m <- g.members, into: %{}, do: {m, g.members}

    outside = fn
      reader, {:value, m, 0} -> Map.has_key?(group, m) and reader not in group[m]
      _, _ -> false
    end

    from_instrs = for j <- 0..(n - 1)//1, slot <- slots(elem(instrs, j)), outside.(j, slot), do: elem(slot, 1)
    from_outputs = for slot <- outputs, outside.(:out, slot), do: elem(slot, 1)
    MapSet.new(from_instrs ++ from_outputs)
  end

  # Group `g`'s instruction: its inputs are the slots its members read from outside it, and
  # its outputs the members read outside it (`given`, in order).
  defp fused_instr(instrs, g, read, map, scalars) do
    members = for m <- g.members, do: elem(instrs, m)
    {:op, _, _, opts, _} = List.last(members)
    own = MapSet.new(g.members)

    external =
      members
      |> Enum.flat_map(&elem(&1, 2))
      |> Enum.reject(&(match?({:value, _, 0}, &1) and MapSet.member?(own, elem(&1, 1))))
      |> Enum.uniq()

    {literals, external} = literals(external, elem(g.key, 0), scalars)
    registers = external |> Enum.with_index() |> Map.new()

    registers =
      (Enum.map(literals, &elem(&1, 0)) ++ Enum.map(g.members, &{:value, &1, 0}))
      |> Enum.with_index(length(external))
      |> Enum.into(registers)

    ops =
      for({_slot, bits} <- literals, do: {"constant", [bits]}) ++
        for({:op, "nx_" <> name, inputs, _, _} <- members, do: {name, Enum.map(inputs, &Map.fetch!(registers, &1))})
    given = Enum.filter(g.members, &MapSet.member?(read, &1))
    label = "fused: " <> Enum.map_join(members, ", ", &elem(&1, 4))

    # (the group's type: its last member may be a comparison, whose own type is u8)
    fused_opts = [
      type: elem(g.key, 0),
      shape: opts[:shape],
      ops: ops,
      outputs: Enum.map(given, &Map.fetch!(registers, {:value, &1, 0}))
    ]

    {{:op, "nx_fused", Enum.map(external, &rename(&1, map)), fused_opts, label}, given}
  end

  # The constants among `external` that hold one number everywhere and that an f32 kernel
  # takes as literals (an operand of an elementwise op broadcasts to the op's shape, so a
  # constant of any shape is its number there),
  # `[{slot, f32 bits}]`, and the inputs left (one at least: a kernel reads a buffer).
  defp literals(external, "f32", scalars) do
    {literals, inputs} = Enum.split_with(external, &literal_bits(&1, scalars))
    literals = Enum.map(literals, &{&1, literal_bits(&1, scalars)})

    case inputs do
      [] -> {tl(literals), [elem(hd(literals), 0)]}
      _ -> {literals, inputs}
    end
  end

  defp literals(external, type, scalars) when type in @int_types do
    {literals, inputs} = Enum.split_with(external, &int_literal(&1, type, scalars))
    literals = Enum.map(literals, &{&1, int_literal(&1, type, scalars)})

    case inputs do
      [] -> {tl(literals), [elem(hd(literals), 0)]}
      _ -> {literals, inputs}
    end
  end

  defp literals(external, _type, _scalars), do: {[], external}

  # The value of integer constant `c` in the group's type `type` (as the op casts it there),
  # as the kernel takes it: wrapped into the type, 64-bit values as their signed bits.
  defp int_literal({:const, c}, type, scalars) do
    case scalars[c] do
      {{kind, _}, x} when kind in [:s, :u] and is_integer(x) ->
        bits = type |> String.slice(1..-1//1) |> String.to_integer()
        <<v::signed-size(bits)>> = <<x::size(bits)>>
        if type in ~w(u32) and v < 0, do: v + 0x1_0000_0000, else: v

      _ ->
        nil
    end
  end

  defp int_literal(_slot, _type, _scalars), do: nil

  # The bits of the f32 that constant `c` is in an f32 op (Nx casts it there), where that is
  # a finite normal number (or zero) that its own type holds exactly.
  defp literal_bits({:const, c}, scalars) do
    case scalars[c] do
      {{:f, 32}, x} when is_number(x) and abs(x) <= 3.4e38 -> f32_bits(x)
      {{kind, _}, x} when kind in [:s, :u] and is_integer(x) and abs(x) <= 16_777_216 -> f32_bits(x)
      _ -> nil
    end
  end

  defp literal_bits(_slot, _scalars), do: nil

  defp f32_bits(x) do
    <<bits::32>> = <<x::float-32>>
    <<f::float-32>> = <<bits::32>>
    if f == 0 or abs(f) >= 1.1754944e-38, do: bits, else: nil
  end

  defp rename_instr({:op, kernel, inputs, opts, label}, map),
    do: {:op, kernel, Enum.map(inputs, &rename(&1, map)), opts, label}

  defp rename_instr({:cond, inputs, clauses, last}, map), do: {:cond, Enum.map(inputs, &rename(&1, map)), clauses, last}
  defp rename_instr({:while, initial, pred, body}, map), do: {:while, Enum.map(initial, &rename(&1, map)), pred, body}
  defp rename_instr({:repeat, inputs, times, body}, map), do: {:repeat, Enum.map(inputs, &rename(&1, map)), times, body}
  defp rename_instr({:hook, id, inputs}, map), do: {:hook, id, Enum.map(inputs, &rename(&1, map))}
  defp rename_instr({:call, id, inputs, outputs}, map), do: {:call, id, Enum.map(inputs, &rename(&1, map)), outputs}

  defp rename({:value, i, k}, map) do
    case Map.fetch!(map, i) do
      {:moved, new} -> {:value, new, k}
      {:fused, new, out} when k == 0 -> {:value, new, out}
    end
  end

  defp rename(slot, _map), do: slot
end
