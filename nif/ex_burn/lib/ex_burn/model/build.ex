if Code.ensure_loaded?(Axon) do
  defmodule ExBurn.Model.Build do
    @moduledoc false
    # ExBurn.Model.compile/2, quantize/2, to_device/2, clone/1: building the struct from an
    # Axon graph and options, initialising the parameters on the device, and copying them.

    alias Axon.ModelState
    alias Nx.Defn.Composite
    alias ExBurn.Model
    alias ExBurn.Model.{Device, Loss, Params, Spec}
    alias ExBurn.Training.Optimizer

    @compile_opts [:loss, :loss_opts, :optimizer, :learning_rate, :weight_decay, :input, :input_type, :seed, :device]

    def compile(%Axon{} = axon, opts) do
      fun = "ExBurn.Model.compile"
      opts = Model.options!(opts, @compile_opts, fun)
      {loss, loss_opts} = Loss.validate!(Keyword.get(opts, :loss, :cross_entropy), opts[:loss_opts] || [], fun)

      spec =
        Optimizer.validate!(
          Keyword.get(opts, :optimizer, :adam),
          Keyword.take(opts, [:learning_rate, :weight_decay]),
          fun
        )

      {kind, device} = Device.resolve!(opts[:device], fun)
      input = Spec.input!(axon, opts[:input], Nx.Type.normalize!(opts[:input_type] || {:f, 32}), fun)

      %Model{
        loss_fn: loss,
        loss_opts: loss_opts,
        optimizer: spec.name,
        optimizer_opts: spec.opts ++ spec.training,
        weight_decay: (spec.opts[:weight_decay] || 0.0) * 1.0,
        device: kind,
        device_spec: device,
        input: input,
        seed: seed!(opts[:seed], fun)
      }
      |> with_graph(axon)
      |> then(&%{&1 | state: init_state(&1)})
    end

    def compile(other, _opts),
      do: raise(ArgumentError, "ExBurn.Model.compile: expected an %Axon{} model, got #{inspect(other, limit: 5)}")

    defp seed!(nil, _fun), do: :erlang.unique_integer([:positive])
    defp seed!(seed, _fun) when is_integer(seed) and seed >= 0, do: seed

    defp seed!(seed, fun),
      do: raise(ArgumentError, "#{fun}: :seed must be a non-negative integer, got #{inspect(seed)}")

    @doc false
    # The graph and what is derived from it: the inference function, the output template,
    # the output layer's activation.
    def with_graph(model, axon) do
      {_init, predict} = Axon.build(axon, mode: :inference, seed: model.seed)

      %{
        model
        | model: axon,
          predict_fn: predict,
          output: Axon.get_output_shape(axon, model.input),
          output_activation: Loss.output_activation(axon)
      }
    end

    defp init_state(%Model{model: axon, input: input, seed: seed} = model) do
      {init, _predict} = Axon.build(axon, seed: seed, mode: :train)
      backend = Model.backend(model)
      sample = Composite.traverse(input, &Nx.broadcast(Nx.tensor(0, type: &1.type, backend: backend), &1.shape))
      Nx.Defn.jit(init, Model.jit_opts(model)).(sample, ModelState.empty())
    end

    def quantize(%Model{} = model, type) do
      fun = "ExBurn.Model.quantize"

      type =
        case type do
          t when t in [:f16, :bf16, :f32, {:f, 16}, {:bf, 16}, {:f, 32}] -> Nx.Type.normalize!(t)
          other -> raise ArgumentError, "#{fun}: unsupported type #{inspect(other)} (types: :f16, :bf16, :f32)"
        end

      try do
        Nx.tensor(0.0, type: type, backend: Model.backend(model)) |> Nx.add(1) |> Nx.to_binary()
      rescue
        e in ExBurn.Error ->
          reraise ExBurn.Error.new(
                    fun,
                    "#{Nx.Type.to_string(type)} is not supported on the device #{model.device_spec}",
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

    def to_device(%Model{} = model, device) do
      {kind, spec} = Device.resolve!(device, "ExBurn.Model.to_device")

      if spec == model.device_spec do
        model
      else
        model = %{model | device: kind, device_spec: spec}
        copy_tensors(model, &Params.on_backend(&1, Model.backend(model)))
      end
    end

    def copy_tensors(model, fun) do
      optimizer_state = with %{state: st} = o <- model.optimizer_state, do: %{o | state: Composite.traverse(st, fun)}
      %{model | state: Params.map(model.state, fun), optimizer_state: optimizer_state}
    end
  end
end
