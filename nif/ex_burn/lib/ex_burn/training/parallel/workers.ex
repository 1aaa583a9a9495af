defmodule ExBurn.Training.Parallel.Workers do
  @moduledoc false
  # One process per device for a data-parallel step, so that the devices work at the same
  # time whether a call only queues work on its device or waits for it (a copy through the
  # host, a first run): each process runs its device's first job (its shard to the device and
  # the gradient program), reports the result, and waits for its second job (the update,
  # which the caller hands out once it has every report and has all-reduced them), runs it
  # and ends. An exception in a job is raised in the caller, after every process has ended.

  @doc false
  # Starts one process per job and waits for each job's result: `{handle, results}`, in the
  # jobs' order.
  def start(jobs) do
    parent = self()
    tag = make_ref()

    tasks =
      for {job, k} <- Enum.with_index(jobs) do
        Task.async(fn ->
          send(parent, {tag, k, attempt(job)})

          receive do
            {^tag, :next, next} -> attempt(next)
            {^tag, :stop} -> {:ok, :stopped}
          end
        end)
      end

    handle = {tag, tasks}
    results = for k <- 0..(length(jobs) - 1)//1, do: receive(do: ({^tag, ^k, result} -> result))

    case Enum.find(results, &match?({:error, _, _, _}, &1)) do
      nil ->
        {handle, Enum.map(results, fn {:ok, value} -> value end)}

      error ->
        stop(handle)
        raise!(error)
    end
  end

  @doc false
  # Hands each process its second job (in the jobs' order) and gives their results.
  def finish({tag, tasks}, nexts) do
    Enum.zip_with(tasks, nexts, fn task, next -> send(task.pid, {tag, :next, next}) end)
    results = Enum.map(tasks, &Task.await(&1, :infinity))

    case Enum.find(results, &match?({:error, _, _, _}, &1)) do
      nil -> Enum.map(results, fn {:ok, value} -> value end)
      error -> raise!(error)
    end
  end

  @doc false
  # Ends the processes without a second job.
  def stop({tag, tasks}) do
    Enum.each(tasks, &send(&1.pid, {tag, :stop}))
    Enum.each(tasks, &Task.await(&1, :infinity))
  end

  defp attempt(fun) do
    {:ok, fun.()}
  catch
    kind, reason -> {:error, kind, reason, __STACKTRACE__}
  end

  defp raise!({:error, kind, reason, stacktrace}), do: :erlang.raise(kind, reason, stacktrace)
end
