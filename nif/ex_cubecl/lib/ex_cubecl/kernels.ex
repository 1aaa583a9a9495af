defmodule ExCubecl.Kernels do
  @moduledoc false
  # `ExCubecl`'s kernels by name: run now, recorded inside `ExCubecl.capture/2`, or written
  # into a given output buffer. The docs and specs are `ExCubecl`'s.
  import ExCubecl.Helpers
  alias ExCubecl.{Buffer, Error, Native, Pipelines, Slot}

  def run_kernel(name, inputs, opts \\ [])

  def run_kernel(name, inputs, %Buffer{} = output), do: run_kernel(name, inputs, output, %{})

  def run_kernel(name, inputs, opts) do
    case Pipelines.capturing() do
      ref when is_reference(ref) and is_list(inputs) ->
        if Enum.all?(inputs, &match?(%Slot{pipeline: ^ref}, &1)),
          do: Pipelines.record(ref, name, inputs, opts),
          else: run_now(name, inputs, opts)

      _ ->
        run_now(name, inputs, opts)
    end
  end

  def run_kernel(name, inputs, %Buffer{} = output, params) do
    op = if is_atom(name) or is_binary(name), do: to_string(name), else: "run_kernel"

    with {:ok, opts} <- params(op, params),
         {:ok, outs} <- run_now(name, inputs, opts),
         {:ok, result} <- single(op, outs),
         :ok <- assign(op, output, result) do
      {:ok, output}
    end
  end

  def run_kernel(name, _inputs, output, _params),
    do: {:error, Error.new(to_string(name), "the output must be an ExCubecl buffer", inspect(output, limit: 5))}

  def kernels do
    for {name, inputs, options} <- Native.kernels(),
        do: %{name: String.to_atom(name), inputs: inputs, options: options}
  end

  defp single(_op, [result]), do: {:ok, result}
  defp single(op, outs), do: {:error, Error.new(op, "the kernel gives #{length(outs)} outputs; one output buffer takes one", "use run_kernel/3")}

  @doc "Writes `result`'s value into `output`."
  def assign(op, %Buffer{ref: out}, %Buffer{ref: value}) do
    case Native.assign(out, value) do
      {:ok, true} -> :ok
      {:error, e} -> {:error, %{Error.from(e) | op: op}}
    end
  end

  @doc "Kernel options from a map (atom or string keys) or a keyword list."
  def params(_op, params) when is_list(params), do: {:ok, params}

  def params(op, params) when is_map(params) do
    {:ok, Enum.map(params, fn {k, v} -> {if(is_binary(k), do: String.to_atom(k), else: k), v} end)}
  rescue
    _ -> {:error, Error.new(op, "kernel params are a map or keyword list with atom or string keys", inspect(params, limit: 5))}
  end

  def params(op, params), do: {:error, Error.new(op, "kernel params are a map or keyword list", inspect(params, limit: 5))}

  defp run_now(name, inputs, opts) do
    op = if is_atom(name) or is_binary(name), do: to_string(name), else: "run_kernel"

    with :ok <- check_name(op, name),
         {:ok, refs} <- refs(op, inputs),
         :ok <- check_opts(op, opts),
         {device_opt, kernel_opts} = Keyword.split(opts, [:device]),
         {:ok, device} <- kernel_device(op, inputs, device_opt),
         {:ok, outs} <- Native.run_kernel(op, refs, kernel_opts, device) do
      {:ok, for({ref, shape, dtype} <- outs, do: %Buffer{ref: ref, shape: shape, dtype: dtype, device: device})}
    else
      error -> error(error)
    end
  end

  # The inputs' device (the NIF checks that they share it), or the :device option's.
  defp kernel_device(_op, [%Buffer{device: device} | _], []), do: {:ok, device}
  defp kernel_device(op, _inputs, device_opt), do: device_opt(op, device_opt)
end
