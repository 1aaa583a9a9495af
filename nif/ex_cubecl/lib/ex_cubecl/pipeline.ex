defmodule ExCubecl.Pipeline do
  @moduledoc """
  A pipeline: a list of kernels over slots — the pipeline's inputs (`{:input, i}`) and earlier
  steps' outputs (`{:step, s, k}`) — recorded once and replayed in one NIF call on new
  buffers, through the backend's `Pipeline` (launches captured on the first run, replayed
  without the host-side work of the ops).

  The first run fixes the inputs' shapes and dtypes and the outputs; later runs must match
  (a mismatch is an error naming the input and both shapes).
  """
  @enforce_keys [:ref]
  defstruct [:ref, outputs: nil]

  @type slot :: {:input, non_neg_integer()} | {:step, non_neg_integer(), non_neg_integer()}
  @type t :: %__MODULE__{ref: reference(), outputs: [slot()] | nil}

  defimpl Inspect do
    def inspect(%{outputs: outputs}, _opts), do: "#ExCubecl.Pipeline<outputs: #{inspect(outputs)}>"
  end
end

defmodule ExCubecl.Slot do
  @moduledoc """
  A value inside `ExCubecl.capture/2`: a pipeline input or a kernel's output, which
  `ExCubecl.run_kernel/3` records instead of running while the capture is active.
  """
  @enforce_keys [:pipeline, :slot]
  defstruct [:pipeline, :slot]

  @type t :: %__MODULE__{pipeline: reference(), slot: ExCubecl.Pipeline.slot()}
end
