defmodule ExCubecl.Command do
  @moduledoc """
  A kernel command: kernel `kernel` over the buffers `inputs`, its result written into the
  buffer `output`, with the kernel's options `params` (a map or keyword list; see
  `ExCubecl.kernels/0`). `ExCubecl.submit/1` runs one; `ExCubecl.pipeline_add_struct/2` adds
  one to a pipeline.

      cmd = ExCubecl.Command.run_kernel(:add, [a, b], out)
      {:ok, id} = ExCubecl.submit(cmd)
  """
  @enforce_keys [:kernel, :inputs, :output]
  defstruct [:kernel, :inputs, :output, params: %{}]

  @type t :: %__MODULE__{
          kernel: atom() | String.t(),
          inputs: [ExCubecl.Buffer.t()],
          output: ExCubecl.Buffer.t(),
          params: map() | keyword()
        }

  @doc "A command running `kernel` on `inputs` into `output`. `ExCubecl.Command.run_kernel(:relu, [x], x)`"
  @spec run_kernel(atom() | String.t(), [ExCubecl.Buffer.t()], ExCubecl.Buffer.t(), map() | keyword()) :: t()
  def run_kernel(kernel, inputs, output, params \\ %{}),
    do: %__MODULE__{kernel: kernel, inputs: inputs, output: output, params: params}
end
