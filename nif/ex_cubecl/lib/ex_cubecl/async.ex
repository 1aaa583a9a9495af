defmodule ExCubecl.Async do
  @moduledoc false
  # `ExCubecl`'s asynchronous commands: pipeline replays and kernel lists on the NIF's
  # per-device queues, `ExCubecl.Command`s, and the ids that `poll/1` and `wait/2` answer
  # for. The docs and specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.{Buffer, Error, Kernels, Native, Pipeline, Registry}

  def submit(work, inputs, opts \\ [])

  def submit(%Pipeline{ref: ref}, inputs, _opts) do
    with {:ok, refs} <- refs("submit", inputs), do: Native.submit_pipeline(ref, refs) |> ok_or_error()
  end

  def submit(calls, inputs, opts) when is_list(calls) and calls != [] do
    with {:ok, refs} <- refs("submit", inputs),
         {:ok, device} <- device_opt("submit", opts),
         {:ok, calls} <- normalize_calls(calls) do
      outputs = Keyword.get(opts, :outputs, [{:step, length(calls) - 1, 0}])
      safe(fn -> Native.submit_kernels(calls, refs, outputs, device) end, "submit") |> ok_or_error()
    else
      error -> error(error)
    end
  end

  def submit(other, _inputs, _opts),
    do: {:error, Error.new("submit", "expects a pipeline or a non-empty list of {kernel, slots, opts}", inspect(other, limit: 5))}

  def submit(%ExCubecl.Command{kernel: kernel, inputs: inputs, output: output, params: params}) do
    with {:ok, out} <- Kernels.run_kernel(kernel, inputs, output, params), do: {:ok, register([out])}
  end

  def submit(other), do: {:error, Error.new("submit", "expects an %ExCubecl.Command{} (or a pipeline or kernel list with its inputs: submit/2)", inspect(other, limit: 5))}

  def poll(id) when is_integer(id) and id > 0 do
    case Registry.get({:command, id}) || Native.poll(id) do
      [_ | _] -> {:ok, :completed}
      {:ok, status} -> {:ok, String.to_existing_atom(status)}
      error -> error(error)
    end
  end

  def poll(id), do: {:error, Error.new("poll", "a command id is a positive integer", inspect(id))}

  def wait(id, timeout \\ :infinity)

  def wait(id, timeout) when is_integer(id) and id > 0 and (timeout == :infinity or (is_integer(timeout) and timeout >= 0)) do
    ms = if timeout == :infinity, do: -1, else: timeout

    case Registry.take({:command, id}) || Native.wait(id, ms) do
      [%Buffer{} | _] = buffers -> {:ok, buffers}
      {:ok, refs} -> wrap_all(refs)
      {:error, %{op: _} = e} -> {:error, %{Error.from(e) | op: "wait"}}
      error -> error(error)
    end
  end

  def wait(id, timeout), do: {:error, Error.new("wait", "expects a command id and a timeout", inspect({id, timeout}))}

  @doc "A finished command's outcome, for `poll/1` and `wait/2`; gives its id."
  def register(buffers) do
    id = Registry.next_id()
    Registry.put({:command, id}, buffers)
    id
  end

  defp normalize_calls(calls) do
    map_ok(calls, fn
      {name, slots, opts} when (is_atom(name) or is_binary(name)) and is_list(slots) and is_list(opts) ->
        {:ok, {to_string(name), slots, opts}}

      other ->
        {:error, Error.new("submit", "a call is {kernel, slots, opts}", inspect(other, limit: 5))}
    end)
  end
end
