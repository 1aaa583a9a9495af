if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Training.Parallel do
    @moduledoc """
    Data-parallel training over several devices (`ExBurn.Training.fit/3` with `devices:`):
    one replica of the model and its optimizer state per device, each step

      1. the batch cut into one equal shard per device, each shard on its device: for `{x, y}`
         tensors the shards come so (`ExBurn.Training.Data`'s `sharded`: each device's rows
         of a whole pass are copied to it once, at the pass's first step, and its shard of a
         step is a slice of them); batches of an enumerable are cut here and each shard
         copied to its device;
      2. on each device, one compiled call of the gradient program on its shard and replica:
         the train-mode forward pass, the loss, the exact gradients
         (`Nx.Defn.value_and_grad/3`), packed with the loss and the layers' float state
         (batch-norm statistics) into one flat vector;
      3. one NIF call, `ExCubecl.all_reduce/2` with `:mean`, over the devices' vectors (NCCL
         on CUDA, through the host elsewhere): every device gets the same mean, which is the
         full batch's gradient for a mean-reduced loss;
      4. on each device, one compiled call of the update program: the vector unpacked, the
         optimizer's update (`ExBurn.Training.Optimizer`), applied to the replica.

    Steps 1-2 and 4 of each device run in a process of its own
    (`ExBurn.Training.Parallel.Workers`), so the devices work at the same time; step 3 waits
    for every device's vector.

    Every replica starts from the same parameters and optimizer state and applies the same
    reduced gradients, so they stay identical. The first device's replica is the loop's step
    state (`model_state`, `optimizer_state`, the full batch's `y_true`, and `batch_loss`, the
    mean of the shards' losses, for the loss metric); the others are in its `replicas` field.
    The shards' predictions are gathered on the first device into `y_pred` only for a run
    with metrics (`gather: true`); otherwise `y_pred` is `nil`. What a step copies between
    devices (predictions, shards of an enumerable's batches) is a plain `Nx.backend_copy/2`
    whose source may be dropped at once: the runtime makes the source's device wait for the
    send (`to_device` in docs/distributed.md).

    The steps run outside `Axon.Loop`'s jit (`jit_compile?: false`): the programs are
    compiled with `Nx.Defn.compile/3` once per device and shapes (`ExBurn.Defn.Compiler`).
    """

    alias Axon.ModelState
    alias Nx.Defn.Composite
    alias ExBurn.Model
    alias ExBurn.Model.{Device, Loss}
    alias ExBurn.Training.{Optimizer, Step}
    alias ExBurn.Training.Parallel.Workers

    @compiled {__MODULE__, :compiled}

    @doc """
    The devices of a `devices:` option: `nil` (no data parallelism), or a list of distinct
    device strings, each resolved (`ExBurn.Model.Device.resolve!/2`: an unknown device raises
    `ExBurn.Error` naming `fun`).
    """
    @spec devices!(term(), String.t()) :: [String.t()] | nil
    def devices!(nil, _fun), do: nil

    def devices!([_ | _] = devices, fun) do
      specs = Enum.map(devices, &elem(Device.resolve!(&1, fun), 1))

      case specs -- Enum.uniq(specs) do
        [] ->
          specs

        twice ->
          raise ArgumentError,
                "#{fun}: :devices names #{Enum.map_join(Enum.uniq(twice), ", ", &inspect/1)} more than once (#{inspect(devices)}); each device holds one replica"
      end
    end

    def devices!(other, fun),
      do: raise(ArgumentError, "#{fun}: :devices must be a non-empty list of devices, got #{inspect(other)}")

    @doc """
    Raises `ArgumentError` naming `fun` unless a batch of `rows` examples splits into equal
    shards over `count` devices.
    """
    @spec check_split!(non_neg_integer(), pos_integer(), String.t(), String.t()) :: :ok
    def check_split!(rows, count, what, fun) do
      if rem(rows, count) == 0 and rows > 0,
        do: :ok,
        else:
          raise(
            ArgumentError,
            "#{fun}: #{what} of #{rows} examples doesn't split into equal shards over #{count} devices; give a :batch_size divisible by #{count} (and drop_last: true, or a sample count whose last batch divides too)"
          )
    end

    @doc """
    The data-parallel step of `model` (on the first of `devices`) with the optimizer spec
    `spec`: `%{step, optimizer, loss_fn, spec, key, devices, ...}`, as `ExBurn.Training.Step.build/3`
    gives for one device. Options: `gather: true` puts the full batch's predictions in the
    step state's `y_pred` (for metrics; default `true`).
    """
    @spec build(Model.t(), map(), [String.t()], String.t(), keyword()) :: map()
    def build(%Model{} = model, spec, devices, fun, opts \\ []) do
      loss_fn = Loss.fun(model.loss_fn, model.loss_opts, model.output_activation)
      {_init, forward} = Axon.build(model.model, mode: :train, seed: model.seed)
      {_init, update} = optimizer = Optimizer.build(spec)
      flat_type = flat_type(model)

      grad = fn model_state, x, y ->
        trainable = ModelState.trainable_parameters(model_state)

        {{out, loss}, grads} =
          Nx.Defn.value_and_grad(
            trainable,
            fn params ->
              out = forward.(Step.with_params(model_state, params), x)
              {out, loss_fn.(y, out.prediction)}
            end,
            &elem(&1, 1)
          )

        {pack(loss, {grads, out.state}, flat_type), out.prediction, out.state}
      end

      apply_update = fn model_state, optimizer_state, flat, layer_state, loss, i ->
        trainable = ModelState.trainable_parameters(model_state)
        {grads, layer_state} = unpack(flat, {trainable, layer_state})
        {updates, optimizer_state} = update.(grads, optimizer_state, trainable)
        params = Polaris.Updates.apply_updates(trainable, updates)
        batch_loss = flat |> Nx.slice([0], [1]) |> Nx.reshape({}) |> Nx.as_type(:f32)
        loss = loss |> Nx.multiply(i) |> Nx.add(batch_loss) |> Nx.divide(Nx.add(i, 1))
        {ModelState.update(model_state, params, layer_state), optimizer_state, loss, Nx.add(i, 1), batch_loss}
      end

      built = %{
        optimizer: optimizer,
        loss_fn: loss_fn,
        spec: spec,
        key: Step.key(model, spec),
        devices: devices,
        grad: grad,
        update: apply_update,
        gather: Keyword.get(opts, :gather, true),
        fun: fun,
        id: make_ref()
      }

      Map.put(built, :step, fn batch, state -> step(batch, state, built) end)
    end

    # The widest float type of the trainable parameters (at least f32): the flat vector's.
    defp flat_type(model) do
      model.state
      |> ModelState.trainable_parameters()
      |> then(&Composite.flatten_list([&1]))
      |> Enum.map(& &1.type)
      |> Enum.filter(&Nx.Type.float?/1)
      |> Enum.reduce({:f, 32}, &Nx.Type.merge/2)
    end

    # The loss, then every float tensor of `container` (in its container order), flattened
    # into one vector of `type`.
    defp pack(loss, container, type) do
      parts =
        for t <- Composite.flatten_list([container]),
            Nx.Type.float?(Nx.type(t)),
            do: t |> Nx.flatten() |> Nx.as_type(type)

      Nx.concatenate([loss |> Nx.as_type(type) |> Nx.reshape({1}) | parts])
    end

    # `container` with its float tensors read back from `flat` (after the loss), as `pack/3`
    # wrote them; the other tensors as they are.
    defp unpack(flat, container) do
      {result, _offset} =
        Composite.traverse(container, 1, fn t, offset ->
          if Nx.Type.float?(Nx.type(t)) do
            size = Nx.size(t)
            {flat |> Nx.slice([offset], [size]) |> Nx.reshape(Nx.shape(t)) |> Nx.as_type(Nx.type(t)), offset + size}
          else
            {t, offset}
          end
        end)

      result
    end

    @doc """
    The step state for a first batch `{x, y}`: `ExBurn.Training.Step.initial_state/3`'s on
    the first device, and the other devices' replicas (copies of its model and optimizer
    state) in `replicas`. Gives `{state, updates}`.
    """
    @spec initial_state(Model.t(), map(), {term(), term()}) :: {map(), non_neg_integer()}
    def initial_state(%Model{} = model, built, first) do
      {state, updates} = Step.initial_state(model, built, first)

      replicas =
        for dev <- tl(built.devices) do
          backend = {ExBurn.Backend, device: dev}
          copy = &Composite.traverse(&1, fn t -> Nx.backend_copy(t, backend) end)

          %{
            device: dev,
            model_state: copy.(state.model_state),
            optimizer_state: copy.(state.optimizer_state),
            loss: copy.(state.loss),
            i: copy.(state.i)
          }
        end

      {Map.put(state, :replicas, replicas), updates}
    end

    @doc "The models of each device's replica in a step state, the first device's first."
    @spec replicas(Model.t(), map(), map(), non_neg_integer()) :: [Model.t()]
    def replicas(%Model{} = model, built, state, updates) do
      first = Step.model_after(model, built, state, updates)

      others =
        for r <- Map.get(state, :replicas, []) do
          model = %{model | device: Device.kind_of(r.device), device_spec: r.device}
          Step.model_after(model, built, r, updates)
        end

      [first | others]
    end

    @doc "`state` with the learning-rate multiplier of every replica set to `value`."
    @spec put_multiplier(map(), number()) :: map()
    def put_multiplier(state, value) do
      state = update_in(state.optimizer_state, &Step.put_multiplier(&1, value))

      case state do
        %{replicas: replicas} ->
          %{
            state
            | replicas: Enum.map(replicas, &update_in(&1.optimizer_state, fn o -> Step.put_multiplier(o, value) end))
          }

        _ ->
          state
      end
    end

    ## The step

    # A batch from ExBurn.Training.Data's `sharded` (each device's shard a slice of its part,
    # already on it), or `{x, y}` as an enumerable of batches gives it (cut here, each shard
    # copied to its device by that device's process).
    defp step({:shards, y, pass, start, rows}, state, built) do
      parts = ExBurn.Training.Parallel.Shards.parts(pass)

      shards = for {xs, ys} <- parts, do: {fn -> {slice(xs, start, rows), slice(ys, start, rows)} end, {xs, ys}}
      step(y, shards, rows, state, built)
    end

    defp step({x, y}, state, built) do
      devices = built.devices
      count = length(devices)
      rows = [x] |> Composite.flatten_list() |> hd() |> Nx.axis_size(0)
      check_split!(rows, count, "a batch", built.fun)
      shard = div(rows, count)

      shards =
        for {dev, k} <- Enum.with_index(devices) do
          {fn -> shard({x, y}, k * shard, shard, count, dev) end, {x, y}}
        end

      step(y, shards, shard, state, built)
    end

    defp step(y, shards, rows, state, built) do
      [first | _] = built.devices

      replicas = [
        %{
          device: first,
          model_state: state.model_state,
          optimizer_state: state.optimizer_state,
          loss: state.loss,
          i: state.i
        }
        | state.replicas
      ]

      gather = built.gather

      # Each device's process: its shard to it, the gradient program (the predictions copied
      # to the first device where metrics need them).
      grads =
        Enum.zip_with(replicas, shards, fn r, {shard, {xs, ys}} ->
          grad = compiled(built, :grad, r.device, [r.model_state, template(xs, rows), template(ys, rows)])

          fn ->
            {xs, ys} = shard.()
            {flat, pred, layer_state} = grad.(r.model_state, xs, ys)
            {flat, if(gather, do: send_to(pred, first)), layer_state}
          end
        end)

      {workers, grads} = Workers.start(grads)

      updated =
        try do
          flats = all_reduce!(Enum.map(grads, &elem(&1, 0)), built.fun)

          updates =
            Enum.zip_with([replicas, grads, flats], fn [r, {_flat, _pred, layer_state}, flat] ->
              args = [r.model_state, r.optimizer_state, flat, layer_state, r.loss, r.i]
              update = compiled(built, :update, r.device, args)
              fn -> update |> apply(args) |> then(&{r, &1}) end
            end)

          Workers.finish(workers, updates)
        catch
          kind, reason ->
            Workers.stop(workers)
            :erlang.raise(kind, reason, __STACKTRACE__)
        end

      [r0 | rest] =
        for {r, {model_state, optimizer_state, loss, i, _batch_loss}} <- updated,
            do: %{r | model_state: model_state, optimizer_state: optimizer_state, loss: loss, i: i}

      {_r, {_, _, _, _, batch_loss}} = hd(updated)

      state
      |> Map.merge(%{
        i: r0.i,
        loss: r0.loss,
        batch_loss: batch_loss,
        y_true: y,
        y_pred: if(gather, do: gather(Enum.map(grads, &elem(&1, 1))), else: nil),
        model_state: r0.model_state,
        optimizer_state: r0.optimizer_state,
        replicas: rest
      })
    end

    # Rows [start, start + len) of every tensor of `container` (a slice on its device).
    defp slice(container, start, len), do: Composite.traverse(container, &Nx.slice_along_axis(&1, start, len, axis: 0))

    # Rows [start, start + len) of every tensor of `container`, on `dev` (the whole batch when
    # there is one device).
    defp shard(container, _start, _len, 1, _dev), do: container

    defp shard(container, start, len, _count, dev), do: container |> slice(start, len) |> send_to(dev)

    # The tensors of `container` on `dev` (those there already as they are). The sources need
    # no hold: the runtime makes a source's device wait for the send (`to_device` in
    # docs/distributed.md), so its memory isn't reused before NCCL has read it.
    defp send_to(container, dev), do: Composite.traverse(container, &on_device(&1, dev))

    defp on_device(%Nx.Tensor{data: %ExBurn.Backend{device: dev}} = t, dev), do: t
    defp on_device(t, dev), do: Nx.backend_copy(t, {ExBurn.Backend, device: dev})

    # The template of `container`'s tensors with `rows` rows.
    defp template(container, rows),
      do: Composite.traverse(container, &Nx.template(put_elem(&1.shape, 0, rows), &1.type))

    # The predictions of the shards (each on the first device already), concatenated there
    # (for the loop's metrics).
    defp gather([one]), do: one

    defp gather([first | _] = preds) do
      leaves = Enum.map(preds, &Composite.flatten_list([&1]))
      joined = Enum.zip_with(leaves, &Nx.concatenate(&1, axis: 0))
      {result, []} = Composite.traverse(first, joined, fn _t, [j | rest] -> {j, rest} end)
      result
    end

    # The mean of the devices' flat vectors on every device: one ExCubecl.all_reduce/2 call.
    defp all_reduce!([one], _fun), do: [one]

    defp all_reduce!(flats, fun) do
      buffers =
        for %Nx.Tensor{data: %ExBurn.Backend{ref: ref, device: dev}, shape: shape, type: type} <- flats,
            do: %ExCubecl.Buffer{
              ref: ref,
              shape: Tuple.to_list(shape),
              dtype: String.to_atom(Nx.Type.to_string(type)),
              device: dev
            }

      case ExCubecl.all_reduce(buffers, :mean) do
        {:ok, reduced} ->
          Enum.zip_with(flats, reduced, fn t, b -> %{t | data: %ExBurn.Backend{ref: b.ref, device: b.device}} end)

        {:error, e} ->
          raise ExBurn.Error.from(fun, e)
      end
    end

    # `built`'s program `which` on `dev` for arguments of these templates (or tensors):
    # compiled once per device and argument shapes (remembered by the process that runs the
    # loop; the device's process calls it).
    defp compiled(built, which, dev, args) do
      templates = Enum.map(args, &Composite.traverse(&1, fn t -> Nx.to_template(t) end))
      key = {built.id, which, dev, templates}
      compiled = Process.get(@compiled, %{})

      case compiled do
        %{^key => fun} ->
          fun

        %{} ->
          fun = Nx.Defn.compile(Map.fetch!(built, which), templates, compiler: ExBurn.Defn.Compiler, device: dev)
          Process.put(@compiled, Map.put(compiled, key, fun))
          fun
      end
    end

    @doc "Forgets the programs this process compiled for data-parallel steps."
    @spec forget() :: :ok
    def forget do
      Process.delete(@compiled)
      :ok
    end
  end
end
