defmodule ExCubecl.Pipelines do
  @moduledoc false
  # `ExCubecl`'s pipelines: kernels over slots (`pipeline_add/4`, `capture/2`) replayed on new
  # buffers, and commands writing into output buffers (`pipeline_add/5`, `pipeline_run/1`),
  # run as one pipeline of slots. The docs and specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.{Async, Buffer, Error, Kernels, Native, Pipeline, Registry, Slot}

  # While `capture/2` runs `fun`, the process holds the pipeline's ref under this key.
  @capture {ExCubecl, :capture}

  def pipeline, do: {:ok, %Pipeline{ref: Native.pipeline_new()}}

  # ---------------------------------------------------------------------------------------
  # Kernels over slots

  def pipeline_add(pipeline, name, inputs, opts \\ [])

  def pipeline_add(pipeline, name, inputs, %Buffer{} = output), do: pipeline_add(pipeline, name, inputs, output, %{})

  def pipeline_add(%Pipeline{ref: ref}, name, inputs, opts) when is_list(inputs) do
    op = if is_atom(name) or is_binary(name), do: to_string(name), else: "pipeline_add"

    with :ok <- check_name(op, name),
         :ok <- check_opts(op, opts),
         {:ok, step} <- Native.pipeline_add(ref, op, inputs, opts) do
      {:ok, {:step, step, 0}}
    else
      error -> error(error)
    end
  rescue
    ArgumentError -> {:error, Error.new("pipeline_add", "slots are {:input, i} or {:step, s, k}", inspect(inputs, limit: 5))}
  end

  def pipeline_add(other, _name, _inputs, _opts),
    do: {:error, Error.new("pipeline_add", "expects a pipeline and a list of slots", inspect(other, limit: 5))}

  # ---------------------------------------------------------------------------------------
  # Commands into output buffers

  def pipeline_add(%Pipeline{ref: ref}, name, inputs, %Buffer{} = output, params) do
    op = "pipeline_add"

    with :ok <- check_name(op, name),
         :ok <- kernel_known(op, name),
         {:ok, _refs} <- refs(op, inputs),
         {:ok, opts} <- Kernels.params(op, params) do
      %{commands: commands} = Registry.get({:pipeline, ref}) || %{commands: []}
      Registry.put({:pipeline, ref}, %{commands: commands ++ [{to_string(name), inputs, output, opts}], compiled: nil})
      :ok
    end
  end

  def pipeline_add(%Pipeline{}, _name, _inputs, output, _params),
    do: {:error, Error.new("pipeline_add", "the output must be an ExCubecl buffer", inspect(output, limit: 5))}

  def pipeline_add(other, _name, _inputs, _output, _params),
    do: {:error, Error.new("pipeline_add", "expects a pipeline", inspect(other, limit: 5))}

  def pipeline_add_struct(pipeline, %ExCubecl.Command{kernel: k, inputs: i, output: o, params: p}), do: pipeline_add(pipeline, k, i, o, p)

  def pipeline_add_struct(_pipeline, other),
    do: {:error, Error.new("pipeline_add", "expects an %ExCubecl.Command{}", inspect(other, limit: 5))}

  defp kernel_known(op, name) do
    name = to_string(name)

    if Enum.any?(Native.kernels(), &(elem(&1, 0) == name)),
      do: :ok,
      else: {:error, Error.new(op, "unknown kernel #{inspect(name)}", "see ExCubecl.kernels/0")}
  end

  def pipeline_run(%Pipeline{ref: ref}) do
    case Registry.get({:pipeline, ref}) do
      %{commands: [_ | _] = commands} = entry -> run_commands(ref, entry, commands)
      _ -> {:error, Error.new("pipeline_run", "the pipeline has no commands", "add them with pipeline_add/5, or run a pipeline of slots with pipeline_run/3")}
    end
  end

  def pipeline_run(other), do: {:error, Error.new("pipeline_run", "expects a pipeline", inspect(other, limit: 5))}

  # The commands as one pipeline of slots: each buffer a command reads is the pipeline input
  # of its value at the start, or the step of the last command before that wrote it. Compiled
  # once per command list (pipeline_add/5 starts a new list).
  defp run_commands(ref, entry, commands) do
    with {:ok, {native, inputs}} <- compiled(ref, entry, commands),
         {:ok, outs} <- safe(fn -> Native.pipeline_run(native, Enum.map(inputs, & &1.ref), steps(length(commands))) end, "pipeline_run") |> ok_or_error(),
         {:ok, results} <- wrap_all(outs),
         :ok <- assign_last(commands, results) do
      {:ok, for(result <- results, do: Async.register([result]))}
    end
  end

  defp compiled(_ref, %{compiled: {native, inputs}}, _commands), do: {:ok, {native, inputs}}

  defp compiled(ref, _entry, commands) do
    native = Native.pipeline_new()

    {steps, {inputs, _written}} =
      commands
      |> Enum.with_index()
      |> Enum.map_reduce({[], %{}}, fn {{name, ins, out, opts}, k}, {inputs, written} ->
        {slots, inputs} =
          Enum.map_reduce(ins, inputs, fn %Buffer{ref: r} = b, inputs ->
            case {written[r], Enum.find_index(inputs, &(&1.ref == r))} do
              {step, _} when is_integer(step) -> {{:step, step, 0}, inputs}
              {nil, nil} -> {{:input, length(inputs)}, inputs ++ [b]}
              {nil, i} -> {{:input, i}, inputs}
            end
          end)

        {{name, slots, opts}, {inputs, Map.put(written, out.ref, k)}}
      end)

    with :ok <- add_steps(native, steps) do
      Registry.put({:pipeline, ref}, %{commands: commands, compiled: {native, inputs}})
      {:ok, {native, inputs}}
    end
  end

  defp add_steps(native, steps) do
    Enum.reduce_while(steps, :ok, fn {name, slots, opts}, :ok ->
      case Native.pipeline_add(native, name, slots, opts) do
        {:ok, _} -> {:cont, :ok}
        error -> {:halt, error(error)}
      end
    end)
  end

  defp steps(n), do: for(k <- 0..(n - 1), do: {:step, k, 0})

  # Each output buffer gets the value of the last command that wrote it.
  defp assign_last(commands, results) do
    commands
    |> Enum.zip(results)
    |> Enum.reverse()
    |> Enum.uniq_by(fn {{_name, _ins, out, _opts}, _result} -> out.ref end)
    |> Enum.reduce_while(:ok, fn {{name, _ins, out, _opts}, result}, :ok ->
      case Kernels.assign(name, out, result) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  # ---------------------------------------------------------------------------------------
  # Runs, freeing, capture

  def pipeline_run(pipeline, inputs, outputs \\ nil)

  def pipeline_run(%Pipeline{ref: ref, outputs: recorded}, inputs, outputs) do
    with {:ok, refs} <- refs("pipeline_run", inputs),
         outs when is_list(outs) <- outputs || recorded || {:error, Error.new("pipeline_run", "no outputs given", "")},
         {:ok, result} <- safe(fn -> Native.pipeline_run(ref, refs, outs) end, "pipeline_run") do
      wrap_all(result)
    else
      error -> error(error)
    end
  end

  def pipeline_run(other, _inputs, _outputs), do: {:error, Error.new("pipeline_run", "expects a pipeline", inspect(other, limit: 5))}

  def pipeline_free(%Pipeline{ref: ref}) do
    case Registry.take({:pipeline, ref}) do
      %{compiled: {native, _inputs}} -> Native.pipeline_free(native)
      _ -> :ok
    end

    Native.pipeline_free(ref) |> ok_or_error()
  end

  def pipeline_free(other), do: {:error, Error.new("pipeline_free", "expects a pipeline", inspect(other, limit: 5))}

  def capture(fun, n) when is_function(fun, 1) and is_integer(n) and n >= 0 do
    {:ok, %Pipeline{ref: ref} = p} = pipeline()
    previous = Process.put(@capture, ref)

    try do
      outs = List.wrap(fun.(for i <- 0..(n - 1)//1, do: %Slot{pipeline: ref, slot: {:input, i}}))

      if Enum.all?(outs, &match?(%Slot{pipeline: ^ref}, &1)) do
        {:ok, %{p | outputs: Enum.map(outs, & &1.slot)}}
      else
        {:error, Error.new("capture", "the function must return slots of this capture", inspect(outs, limit: 5))}
      end
    rescue
      e in Error -> {:error, e}
    after
      if previous, do: Process.put(@capture, previous), else: Process.delete(@capture)
    end
  end

  def capture(_fun, n), do: {:error, Error.new("capture", "expects a function of one argument and an input count", inspect(n))}

  @doc "The ref of the pipeline that `capture/2` is recording in this process, or nil."
  def capturing, do: Process.get(@capture)

  @doc "Inside `capture/2`: the kernel becomes a step of the pipeline."
  def record(ref, name, inputs, opts) do
    case pipeline_add(%Pipeline{ref: ref}, name, Enum.map(inputs, & &1.slot), Keyword.delete(opts, :device)) do
      {:ok, slot} -> {:ok, [%Slot{pipeline: ref, slot: slot}]}
      error -> error
    end
  end
end
