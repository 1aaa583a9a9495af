defmodule ExCubecl do
  @moduledoc """
  ExCubecl from Elixir: buffers on a GPU (or Mesa's lavapipe), every kernel of the backend
  by name, devices and memory.

  Sections: buffers, kernels, pipelines (`pipeline/0`, `pipeline_add/4`, `pipeline_run/3`,
  `pipeline_free/1`, `capture/2`), asynchronous commands (`submit/3`, `poll/1`, `wait/2`),
  devices, collectives (`all_reduce/2`).

  Kernels also write into given output buffers, as ExBurn's documents call them:
  `run_kernel/4` (`name, inputs, output, params`), pipelines of such commands
  (`pipeline_add/5`, then `pipeline_run/1`), and `submit/1` of an `ExCubecl.Command`.

  Every function returns `{:ok, value}` or `{:error, %ExCubecl.Error{}}`; the bang forms
  return the value or raise `ExCubecl.Error`, whose message starts with the operation. Bad
  input never crashes the VM: it is checked here and in the NIF, and a panic in Rust is
  caught there.

      iex> a = ExCubecl.buffer!([1.0, 2.0, 3.0], [3], :f32)
      iex> b = ExCubecl.buffer!([10.0, 20.0, 30.0], [3], :f32)
      iex> [c] = ExCubecl.run_kernel!(:add, [a, b])
      iex> ExCubecl.to_list!(c)
      [11.0, 22.0, 33.0]

  ## Devices

  A device is a string: `"cuda:0"`, `"wgpu"` (wgpu's default adapter), `"wgpu:discrete:0"`,
  `"wgpu:integrated:0"`, `"wgpu:cpu"` (lavapipe). The default is the first of `devices/0`
  (CUDA, then a hardware Vulkan or Metal adapter, then lavapipe), overridden by the
  application env (`config :ex_cubecl, device: "wgpu"`) or the environment variable
  `EX_CUBECL_DEVICE`. Functions that make tensors from nothing take a `:device` option.
  """
  alias ExCubecl.{Buffer, Error, Host, Native, Pipeline, Registry, Slot}

  @typedoc "Element types: Nx's names, `:bool`, and `:q8` (8-bit quantized, made by the `:quantize` kernel)."
  @type dtype :: :f32 | :f16 | :bf16 | :f64 | :s8 | :s16 | :s32 | :s64 | :u8 | :u16 | :u32 | :u64 | :bool | :q8
  @type result(t) :: {:ok, t} | {:error, Error.t()}

  @dtypes [:f32, :f16, :bf16, :f64, :s8, :s16, :s32, :s64, :u8, :u16, :u32, :u64, :bool]

  # ---------------------------------------------------------------------------------------
  # Buffers

  @doc """
  A buffer of `shape` and `dtype` from a binary (the dtype's native layout; bools one byte
  each) or a flat list of numbers (`:nan`, `:infinity`, `:neg_infinity` for floats; `true`
  and `false` for bools). Options: `:device`.

      iex> {:ok, b} = ExCubecl.buffer(<<1::32-native, 2::32-native>>, [2], :s32)
      iex> ExCubecl.shape(b)
      {:ok, [2]}
  """
  @spec buffer(binary() | list(), [non_neg_integer()], dtype(), keyword()) :: result(Buffer.t())
  def buffer(data, shape, dtype, opts \\ []) do
    with :ok <- check_dtype("buffer", dtype),
         :ok <- check_shape("buffer", shape),
         {:ok, device} <- device_opt("buffer", opts),
         {:ok, binary} <- host_binary(data, dtype),
         {:ok, ref} <- Native.buffer(binary, shape, Atom.to_string(dtype), device) do
      wrap(ref)
    else
      error -> error(error)
    end
  end

  @doc "As `buffer/4`, raising `ExCubecl.Error`. `ExCubecl.buffer!([1, 2], [2], :s32)`"
  @spec buffer!(binary() | list(), [non_neg_integer()], dtype(), keyword()) :: Buffer.t()
  def buffer!(data, shape, dtype, opts \\ []), do: bang(buffer(data, shape, dtype, opts))

  @doc """
  The buffer's bytes (its dtype's native layout; bools one byte each). A quantized buffer
  (dtype `:q8`, from the `:quantize` kernel) reads as Burn's quantized layout: the i8 values
  in row-major order, then one f32 scale per block (or one for the tensor).

      iex> ExCubecl.read(ExCubecl.buffer!([7], [1], :u8))
      {:ok, <<7>>}
  """
  @spec read(Buffer.t()) :: result(binary())
  def read(buffer), do: with_ref("read", buffer, &Native.read/1)

  @doc "As `read/1`, raising. `ExCubecl.read!(ExCubecl.buffer!([7], [1], :u8)) #=> <<7>>`"
  @spec read!(Buffer.t()) :: binary()
  def read!(buffer), do: bang(read(buffer))

  @doc """
  The buffer's values as a flat list (NaN and infinities as atoms).

      iex> ExCubecl.to_list(ExCubecl.buffer!([1.5, :nan], [2], :f32))
      {:ok, [1.5, :nan]}
  """
  @spec to_list(Buffer.t()) :: result(list())
  def to_list(%Buffer{dtype: :q8} = buffer) do
    {:error, Error.new("to_list", "a quantized buffer has no list form: dequantize it first, or read/1 its bytes", inspect(buffer))}
  end

  def to_list(%Buffer{dtype: dtype} = buffer) do
    with {:ok, bin} <- read(buffer), do: {:ok, Host.decode(bin, dtype)}
  end

  def to_list(other), do: not_a_buffer("to_list", other)

  @doc "As `to_list/1`, raising. `ExCubecl.to_list!(ExCubecl.buffer!([1, 2], [2], :s64)) #=> [1, 2]`"
  @spec to_list!(Buffer.t()) :: list()
  def to_list!(buffer), do: bang(to_list(buffer))

  @doc """
  The shape.

      iex> ExCubecl.shape(ExCubecl.buffer!([1, 2, 3, 4], [2, 2], :s32))
      {:ok, [2, 2]}
  """
  @spec shape(Buffer.t()) :: result([non_neg_integer()])
  def shape(%Buffer{shape: shape}), do: {:ok, shape}
  def shape(other), do: not_a_buffer("shape", other)

  @doc "The dtype. `ExCubecl.dtype(ExCubecl.buffer!([1], [1], :f16)) #=> :f16`"
  @spec dtype(Buffer.t()) :: dtype()
  def dtype(%Buffer{dtype: dtype}), do: dtype

  @doc """
  The size in bytes (of the dtype's native layout; bools one byte each).

      iex> {:ok, a} = ExCubecl.buffer([1.0, 2.0, 3.0], [3], :f32)
      iex> ExCubecl.size(a)
      {:ok, 12}
  """
  @spec size(Buffer.t()) :: result(non_neg_integer())
  def size(%Buffer{dtype: :q8} = buffer), do: with({:ok, bin} <- read(buffer), do: {:ok, byte_size(bin)})
  def size(%Buffer{shape: shape, dtype: dtype}), do: {:ok, numel(shape) * Host.size(dtype)}
  def size(other), do: not_a_buffer("size", other)

  defp numel(shape), do: Enum.reduce(shape, 1, &(&1 * &2))

  @doc """
  Frees the buffer's device memory now (the garbage collector does it otherwise). Later use
  of the buffer is an error; freeing twice gives `{:ok, false}`.

      iex> b = ExCubecl.buffer!([1.0], [1], :f32)
      iex> ExCubecl.free(b)
      {:ok, true}
      iex> {:error, %ExCubecl.Error{op: "read", reason: "the tensor was freed"}} = ExCubecl.read(b)
  """
  @spec free(Buffer.t()) :: result(boolean())
  def free(buffer), do: with_ref("free", buffer, &Native.free/1)

  # ---------------------------------------------------------------------------------------
  # Kernels

  @doc """
  Runs the kernel `name` (an atom or string; see `kernels/0`) on `inputs` (buffers on one
  device) with keyword `opts`, giving its output buffers. Kernels without inputs (`:zeros`,
  `:random_uniform`, ...) take a `:device` option.

      iex> x = ExCubecl.buffer!([3.0, 1.0, 2.0], [3], :f32)
      iex> {:ok, [sorted]} = ExCubecl.run_kernel(:sort, [x], axis: 0)
      iex> ExCubecl.to_list!(sorted)
      [1.0, 2.0, 3.0]
  """
  @spec run_kernel(atom() | String.t(), [Buffer.t()], keyword() | Buffer.t()) :: result([Buffer.t()]) | result(Buffer.t())
  def run_kernel(name, inputs, opts \\ [])

  def run_kernel(name, inputs, %Buffer{} = output), do: run_kernel(name, inputs, output, %{})

  def run_kernel(name, inputs, opts) do
    case Process.get({__MODULE__, :capture}) do
      ref when is_reference(ref) and is_list(inputs) ->
        if Enum.all?(inputs, &match?(%Slot{pipeline: ^ref}, &1)),
          do: record(ref, name, inputs, opts),
          else: run_now(name, inputs, opts)

      _ ->
        run_now(name, inputs, opts)
    end
  end

  @doc """
  Runs the kernel `name` on `inputs` and writes its result into the buffer `output`, which
  must have the result's shape, dtype and device; `params` are the kernel's options (a map or
  keyword list). Gives `{:ok, output}`; every holder of `output` sees the new values.

      iex> a = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
      iex> out = ExCubecl.buffer!([0.0, 0.0], [2], :f32)
      iex> {:ok, ^out} = ExCubecl.run_kernel(:add, [a, a], out, %{})
      iex> ExCubecl.to_list!(out)
      [2.0, 4.0]
  """
  @spec run_kernel(atom() | String.t(), [Buffer.t()], Buffer.t(), map() | keyword()) :: result(Buffer.t())
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

  defp single(_op, [result]), do: {:ok, result}
  defp single(op, outs), do: {:error, Error.new(op, "the kernel gives #{length(outs)} outputs; one output buffer takes one", "use run_kernel/3")}

  # Writes `result`'s value into `output`.
  defp assign(op, %Buffer{ref: out}, %Buffer{ref: value}) do
    case Native.assign(out, value) do
      {:ok, true} -> :ok
      {:error, e} -> {:error, %{Error.from(e) | op: op}}
    end
  end

  # Kernel options from a map (atom or string keys) or a keyword list.
  defp params(_op, params) when is_list(params), do: {:ok, params}

  defp params(op, params) when is_map(params) do
    {:ok, Enum.map(params, fn {k, v} -> {if(is_binary(k), do: String.to_atom(k), else: k), v} end)}
  rescue
    _ -> {:error, Error.new(op, "kernel params are a map or keyword list with atom or string keys", inspect(params, limit: 5))}
  end

  defp params(op, params), do: {:error, Error.new(op, "kernel params are a map or keyword list", inspect(params, limit: 5))}

  # Inside `capture/2`: the kernel becomes a step of the pipeline.
  defp record(ref, name, inputs, opts) do
    case pipeline_add(%Pipeline{ref: ref}, name, Enum.map(inputs, & &1.slot), Keyword.delete(opts, :device)) do
      {:ok, slot} -> {:ok, [%Slot{pipeline: ref, slot: slot}]}
      error -> error
    end
  end

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

  @doc "As `run_kernel/3`, raising. `[y] = ExCubecl.run_kernel!(:exp, [x])`"
  @spec run_kernel!(atom() | String.t(), [Buffer.t()], keyword()) :: [Buffer.t()]
  def run_kernel!(name, inputs, opts \\ []), do: bang(run_kernel(name, inputs, opts))

  @doc """
  Every kernel: `%{name: atom, inputs: description, options: description}`.

      iex> Enum.find(ExCubecl.kernels(), &(&1.name == :matmul)).inputs
      "a, b (float | int)"
  """
  @spec kernels() :: [%{name: atom(), inputs: String.t(), options: String.t()}]
  def kernels do
    for {name, inputs, options} <- Native.kernels(),
        do: %{name: String.to_atom(name), inputs: inputs, options: options}
  end

  # ---------------------------------------------------------------------------------------
  # Pipelines

  @doc """
  A new, empty pipeline (see `ExCubecl.Pipeline`).

      iex> {:ok, p} = ExCubecl.pipeline()
      iex> {:ok, s} = ExCubecl.pipeline_add(p, :mul, [{:input, 0}, {:input, 0}])
      iex> {:ok, [y]} = ExCubecl.pipeline_run(p, [ExCubecl.buffer!([1.0, 2.0], [2], :f32)], [s])
      iex> ExCubecl.to_list!(y)
      [1.0, 4.0]
  """
  @spec pipeline() :: {:ok, Pipeline.t()}
  def pipeline, do: {:ok, %Pipeline{ref: Native.pipeline_new()}}

  @doc """
  Adds kernel `name` over `inputs` (slots: `{:input, i}` or an earlier step's slot) with
  `opts`; gives the slot of its output. `{:ok, s} = ExCubecl.pipeline_add(p, :exp, [{:input, 0}])`
  """
  @spec pipeline_add(Pipeline.t(), atom() | String.t(), [Pipeline.slot()], keyword() | Buffer.t()) :: result(Pipeline.slot()) | :ok
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

  @doc """
  Adds a command to the pipeline: kernel `name` over the buffers `inputs`, its result written
  into the buffer `output` (of the result's shape, dtype and device), with the kernel's
  options `params` (a map or keyword list). `pipeline_run/1` runs the commands in the order
  added; a command reads its inputs as the commands before it left them, so
  `pipeline_add(p, :add, [buf, buf], buf)` then `pipeline_add(p, :relu, [buf], buf)` leaves
  `relu(buf + buf)` in `buf`.

      iex> {:ok, p} = ExCubecl.pipeline()
      iex> buf = ExCubecl.buffer!([-1.0, 2.0], [2], :f32)
      iex> :ok = ExCubecl.pipeline_add(p, :add, [buf, buf], buf)
      iex> :ok = ExCubecl.pipeline_add(p, :relu, [buf], buf)
      iex> {:ok, [_, _]} = ExCubecl.pipeline_run(p)
      iex> ExCubecl.to_list!(buf)
      [0.0, 4.0]
  """
  @spec pipeline_add(Pipeline.t(), atom() | String.t(), [Buffer.t()], Buffer.t(), map() | keyword()) :: :ok | {:error, Error.t()}
  def pipeline_add(%Pipeline{ref: ref}, name, inputs, %Buffer{} = output, params) do
    op = "pipeline_add"

    with :ok <- check_name(op, name),
         :ok <- kernel_known(op, name),
         {:ok, _refs} <- refs(op, inputs),
         {:ok, opts} <- params(op, params) do
      %{commands: commands} = Registry.get({:pipeline, ref}) || %{commands: []}
      Registry.put({:pipeline, ref}, %{commands: commands ++ [{to_string(name), inputs, output, opts}], compiled: nil})
      :ok
    end
  end

  def pipeline_add(%Pipeline{}, _name, _inputs, output, _params),
    do: {:error, Error.new("pipeline_add", "the output must be an ExCubecl buffer", inspect(output, limit: 5))}

  def pipeline_add(other, _name, _inputs, _output, _params),
    do: {:error, Error.new("pipeline_add", "expects a pipeline", inspect(other, limit: 5))}

  @doc "Adds an `ExCubecl.Command` to a pipeline (as `pipeline_add/5`)."
  @spec pipeline_add_struct(Pipeline.t(), ExCubecl.Command.t()) :: :ok | {:error, Error.t()}
  def pipeline_add_struct(pipeline, %ExCubecl.Command{kernel: k, inputs: i, output: o, params: p}), do: pipeline_add(pipeline, k, i, o, p)

  def pipeline_add_struct(_pipeline, other),
    do: {:error, Error.new("pipeline_add", "expects an %ExCubecl.Command{}", inspect(other, limit: 5))}

  defp kernel_known(op, name) do
    name = to_string(name)

    if Enum.any?(Native.kernels(), &(elem(&1, 0) == name)),
      do: :ok,
      else: {:error, Error.new(op, "unknown kernel #{inspect(name)}", "see ExCubecl.kernels/0")}
  end

  @doc """
  Runs the commands of `pipeline_add/5` in the order added, writing each result into its
  output buffer, and gives their command ids (one a command, in order): `poll/1` answers
  `:completed` for each, and `wait/1` gives the command's result `[buffer]`. The commands run
  as one pipeline of the backend: the first run captures their launches, later runs replay
  them on the buffers' current values. Like every kernel, they are queued on the device and
  this returns without waiting for them; reading a buffer waits.
  """
  @spec pipeline_run(Pipeline.t()) :: result([pos_integer()])
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
      {:ok, for(result <- results, do: register([result]))}
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
      case assign(name, out, result) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  # A finished command's outcome, for poll/1 and wait/1; gives its id.
  defp register(buffers) do
    id = Registry.next_id()
    Registry.put({:command, id}, buffers)
    id
  end

  @doc """
  Runs the pipeline on `inputs` (buffers), giving the buffers at `outputs` (default: those
  `capture/2` recorded). The first run captures the launches; later runs replay them.
  `{:ok, [y]} = ExCubecl.pipeline_run(p, [x], [s])`
  """
  @spec pipeline_run(Pipeline.t(), [Buffer.t()], [Pipeline.slot()] | nil) :: result([Buffer.t()])
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

  @doc """
  Frees the pipeline's captured launches and buffers, and the commands of `pipeline_add/5`.
  `{:ok, true} = ExCubecl.pipeline_free(p)`
  """
  @spec pipeline_free(Pipeline.t()) :: result(boolean())
  def pipeline_free(%Pipeline{ref: ref}) do
    case Registry.take({:pipeline, ref}) do
      %{compiled: {native, _inputs}} -> Native.pipeline_free(native)
      _ -> :ok
    end

    Native.pipeline_free(ref) |> ok_or_error()
  end

  def pipeline_free(other), do: {:error, Error.new("pipeline_free", "expects a pipeline", inspect(other, limit: 5))}

  @doc """
  Records the kernels that `fun` runs on `n` inputs as a pipeline: `fun` receives `n`
  `ExCubecl.Slot`s, calls `run_kernel/3` on them as on buffers, and returns a list of slots,
  the pipeline's outputs.

      iex> {:ok, p} = ExCubecl.capture(fn [x, y] -> ExCubecl.run_kernel!(:add, [x, y]) end, 2)
      iex> a = ExCubecl.buffer!([1, 2], [2], :s32)
      iex> {:ok, [c]} = ExCubecl.pipeline_run(p, [a, a])
      iex> ExCubecl.to_list!(c)
      [2, 4]
  """
  @spec capture(([Slot.t()] -> [Slot.t()]), non_neg_integer()) :: result(Pipeline.t())
  def capture(fun, n) when is_function(fun, 1) and is_integer(n) and n >= 0 do
    {:ok, %Pipeline{ref: ref} = p} = pipeline()
    previous = Process.put({__MODULE__, :capture}, ref)

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
      if previous, do: Process.put({__MODULE__, :capture}, previous), else: Process.delete({__MODULE__, :capture})
    end
  end

  def capture(_fun, n), do: {:error, Error.new("capture", "expects a function of one argument and an input count", inspect(n))}

  # ---------------------------------------------------------------------------------------
  # Asynchronous commands

  @doc """
  Submits a command; gives its id at once. The command is a pipeline replay
  (`submit(pipeline, inputs)`) or a kernel list (`submit([{name, slots, opts}, ...], inputs)`,
  whose last kernel's output is the result; options: `:outputs` (slots), `:device` for lists
  without inputs). Commands of one device run in submission order on its queue's thread;
  the submitting process receives `{:ex_cubecl, id, {:ok, buffers} | {:error, error}}` when
  the command ends.

      iex> x = ExCubecl.buffer!([1.0, 4.0], [2], :f32)
      iex> {:ok, id} = ExCubecl.submit([{:sqrt, [{:input, 0}], []}], [x])
      iex> {:ok, [y]} = ExCubecl.wait(id)
      iex> ExCubecl.to_list!(y)
      [1.0, 2.0]
  """
  @spec submit(Pipeline.t() | [{atom(), [Pipeline.slot()], keyword()}], [Buffer.t()], keyword()) :: result(pos_integer())
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

  @doc """
  Submits an `ExCubecl.Command`: its kernel runs on its inputs and writes its output buffer
  (as `run_kernel/4`); gives the command's id for `poll/1` and `wait/1` (whose outcome is
  `[output]`). The kernel is queued on the device, as every kernel: this returns without
  waiting for it, and a read of the output waits.

      iex> x = ExCubecl.buffer!([1.0, 4.0], [2], :f32)
      iex> {:ok, id} = ExCubecl.submit(ExCubecl.Command.run_kernel(:sqrt, [x], x))
      iex> {:ok, :completed} = ExCubecl.poll(id)
      iex> {:ok, [^x]} = ExCubecl.wait(id)
      iex> ExCubecl.to_list!(x)
      [1.0, 2.0]
  """
  @spec submit(ExCubecl.Command.t()) :: result(pos_integer())
  def submit(%ExCubecl.Command{kernel: kernel, inputs: inputs, output: output, params: params}) do
    with {:ok, out} <- run_kernel(kernel, inputs, output, params), do: {:ok, register([out])}
  end

  def submit(other), do: {:error, Error.new("submit", "expects an %ExCubecl.Command{} (or a pipeline or kernel list with its inputs: submit/2)", inspect(other, limit: 5))}

  @doc "Where command `id` stands: `{:ok, :pending | :running | :completed | :failed}`. `ExCubecl.poll(id)`"
  @spec poll(pos_integer()) :: result(:pending | :running | :completed | :failed)
  def poll(id) when is_integer(id) and id > 0 do
    case Registry.get({:command, id}) || Native.poll(id) do
      [_ | _] -> {:ok, :completed}
      {:ok, status} -> {:ok, String.to_existing_atom(status)}
      error -> error(error)
    end
  end

  def poll(id), do: {:error, Error.new("poll", "a command id is a positive integer", inspect(id))}

  @doc """
  Waits for command `id` (at most `timeout` ms, `:infinity` by default) and takes its output
  buffers; an error when it failed or did not finish in time. `{:ok, outputs} = ExCubecl.wait(id, 5_000)`
  """
  @spec wait(pos_integer(), timeout()) :: result([Buffer.t()])
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

  defp normalize_calls(calls) do
    map_ok(calls, fn
      {name, slots, opts} when (is_atom(name) or is_binary(name)) and is_list(slots) and is_list(opts) ->
        {:ok, {to_string(name), slots, opts}}

      other ->
        {:error, Error.new("submit", "a call is {kernel, slots, opts}", inspect(other, limit: 5))}
    end)
  end

  # Terms the NIF cannot decode raise ArgumentError there: an error here.
  defp safe(fun, op) do
    fun.()
  rescue
    ArgumentError -> {:error, Error.new(op, "slots are {:input, i} or {:step, s, k}; options a keyword list", "")}
  end

  defp ok_or_error({:ok, v}), do: {:ok, v}
  defp ok_or_error(other), do: error(other)

  # ---------------------------------------------------------------------------------------
  # Devices

  @doc """
  The devices of this machine that this build can use, best first:
  `%{device: spec, name: adapter, kind: :gpu | :cpu, api: "cuda" | "vulkan" | ...}`.

      iex> [%{device: _, kind: _} | _] = ExCubecl.devices()
  """
  @spec devices() :: [map()]
  def devices do
    case Native.devices() do
      {:ok, list} -> for {spec, name, kind, api} <- list, do: %{device: spec, name: name, kind: String.to_atom(kind), api: api}
      {:error, _} -> []
    end
  end

  @doc """
  The default device: `config :ex_cubecl, device: ...`, else `EX_CUBECL_DEVICE`, else the
  first of `devices/0`.

      iex> is_binary(ExCubecl.default_device())
      true
  """
  @spec default_device() :: String.t()
  def default_device do
    Application.get_env(:ex_cubecl, :device) || System.get_env("EX_CUBECL_DEVICE") || probed_default()
  end

  defp probed_default do
    case :persistent_term.get({__MODULE__, :default_device}, nil) do
      nil ->
        device = bang(Native.default_device())
        :persistent_term.put({__MODULE__, :default_device}, device)
        device

      device ->
        device
    end
  end

  @doc "The default device with its adapter: `%{device:, name:, kind:, api:, runtimes:}`. `ExCubecl.device_info()`"
  @spec device_info() :: map()
  def device_info do
    device = default_device()
    entry = Enum.find(devices(), %{device: device, name: device, kind: :unknown, api: "unknown"}, &(&1.device == device))
    Map.put(entry, :runtimes, available_backends())
  end

  @doc "How many devices `devices/0` lists. `ExCubecl.device_count() >= 1`"
  @spec device_count() :: non_neg_integer()
  def device_count, do: length(devices())

  @doc "The runtimes compiled into the NIF: `[:cuda, :wgpu]`, `[:wgpu]`, ... `ExCubecl.available_backends()`"
  @spec available_backends() :: [atom()]
  def available_backends, do: Enum.map(Native.runtimes(), &String.to_atom/1)

  @doc """
  How many kernels this process has launched so far, on every device, replayed launches
  included: the difference across a call is the launches it made.

      iex> x = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
      iex> before = ExCubecl.launch_count()
      iex> [_y] = ExCubecl.run_kernel!(:exp, [x])
      iex> ExCubecl.launch_count() - before >= 1
      true
  """
  @spec launch_count() :: non_neg_integer()
  def launch_count, do: Native.launch_count()

  @doc "Whether a CUDA GPU is usable. `ExCubecl.cuda_available?()`"
  @spec cuda_available?() :: boolean()
  def cuda_available?, do: Enum.any?(devices(), &(&1.api == "cuda"))

  @doc "Whether the default device is a hardware GPU (not lavapipe). `ExCubecl.gpu?()`"
  @spec gpu?() :: boolean()
  def gpu?, do: device_info().kind == :gpu

  @doc """
  Memory of the default device's pools (options: `:device`):
  `%{bytes_in_use:, bytes_reserved:, allocations:}`.

      iex> {:ok, %{bytes_in_use: _, bytes_reserved: _}} = ExCubecl.memory_info()
  """
  @spec memory_info(keyword()) :: result(map())
  def memory_info(opts \\ []) do
    with {:ok, device} <- device_opt("memory_info", opts),
         {:ok, {in_use, reserved, allocs}} <- Native.memory_info(device) do
      {:ok, %{bytes_in_use: in_use, bytes_reserved: reserved, allocations: allocs}}
    else
      error -> error(error)
    end
  end

  @doc "The dtypes the default device (or `:device`) stores and computes. `:f32 in ExCubecl.supported_dtypes()`"
  @spec supported_dtypes(keyword()) :: [dtype()]
  def supported_dtypes(opts \\ []) do
    {:ok, device} = device_opt("supported_dtypes", opts)
    device |> Native.supported_dtypes() |> bang() |> Enum.map(&String.to_atom/1)
  end

  @doc """
  Waits until the device (default or `:device`) has run every queued kernel; an error when
  it failed.

      iex> ExCubecl.synchronize()
      :ok
  """
  @spec synchronize(keyword()) :: :ok | {:error, Error.t()}
  def synchronize(opts \\ []) do
    with {:ok, device} <- device_opt("synchronize", opts),
         {:ok, true} <- Native.synchronize(device) do
      :ok
    else
      error -> error(error)
    end
  end

  @doc """
  Caps every allocation of this node at `bytes` (`nil` lifts the cap): a tensor larger than
  that is refused as one larger than the device takes is, with an `ExCubecl.Error` naming the
  operation, the shape and the limit. A guard against runaway sizes, and the way to refuse an
  allocation on purpose (in the middle of a training epoch, say) in a test. The cap holds for
  every process of the node: `ExCubecl.put_allocation_limit(1_000_000)`.
  """
  @spec put_allocation_limit(pos_integer() | nil) :: :ok
  def put_allocation_limit(bytes) when (is_integer(bytes) and bytes > 0) or is_nil(bytes) do
    true = Native.put_allocation_limit(bytes)
    :ok
  end

  @doc """
  Winds the runtime down, as the VM does by itself when it stops: the asynchronous command
  queues take no more commands and finish those queued, kernel launches stop (a later one is
  an `ExCubecl.Error` saying so), and every device used finishes its queued work. Each step
  waits at most a minute; `{:error, _}` names what did not end in time. Reads, frees and
  `synchronize/1` still work afterwards. There is no way back: call it when the work of the
  node is done.

  The same runs at exit: the NIF registers it with the C library's `atexit`, which
  `System.halt/1`, `System.stop/1` and the end of a script reach (the BEAM does not unload
  NIF libraries when it stops), so that no device thread is still compiling or running a
  kernel while the process tears down its libraries.
  """
  @spec shutdown() :: :ok | {:error, Error.t()}
  def shutdown do
    case Native.shutdown() do
      {:ok, true} -> :ok
      error -> error(error)
    end
  end

  @doc "The package version. `ExCubecl.version() #=> \"0.1.0\"`"
  @spec version() :: String.t()
  def version, do: to_string(Application.spec(:ex_cubecl, :vsn) || "0.1.0")

  # ---------------------------------------------------------------------------------------
  # Collectives

  @doc """
  The all-reduce of `buffers`, one per device (one shape and one float dtype: `:f32`, `:f16`,
  `:bf16` or `:f64`): each result, on its buffer's device, holds the sum (`op`: `:sum`, the
  default) or the mean (`:mean`) of all of them. On CUDA it is NCCL's where NCCL is
  installed; on wgpu the values go through the host (sum in f64, identical on every device).
  Within this process: several processes or hosts join through the Rust API
  (`ex_cubecl::distributed::init`), not from Elixir.

      ExCubecl.all_reduce([a, b], :mean)
      #=> {:ok, [mean_on_a_device, mean_on_b_device]}
  """
  @spec all_reduce([Buffer.t()], :sum | :mean) :: result([Buffer.t()])
  def all_reduce(buffers, op \\ :sum)

  def all_reduce(buffers, op) when op in [:sum, :mean] do
    with {:ok, refs} <- refs("all_reduce", buffers),
         {:ok, out} <- Native.all_reduce(refs, Atom.to_string(op)) do
      wrap_all(out)
    else
      error -> error(error)
    end
  end

  def all_reduce(_buffers, op), do: {:error, Error.new("all_reduce", "op must be :sum or :mean", inspect(op))}

  @doc "As `all_reduce/2`, raising `ExCubecl.Error`."
  @spec all_reduce!([Buffer.t()], :sum | :mean) :: [Buffer.t()]
  def all_reduce!(buffers, op \\ :sum), do: bang(all_reduce(buffers, op))

  @doc """
  The buffer on `device` (a device spec, as `devices/0` lists them): a new buffer on that
  device with the same values, or the buffer itself when it is already there. Between two
  CUDA devices the bytes go device to device (NCCL's peer copy, where NCCL is installed)
  without waiting for the work that computes them; elsewhere through the host.

      iex> b = ExCubecl.buffer!([1.5, 2.5], [2], :f32)
      iex> {:ok, c} = ExCubecl.to_device(b, b.device)
      iex> ExCubecl.to_list(c)
      {:ok, [1.5, 2.5]}
  """
  @spec to_device(Buffer.t(), String.t()) :: result(Buffer.t())
  def to_device(%Buffer{ref: ref, device: device} = buffer, device) when is_reference(ref), do: {:ok, buffer}

  def to_device(%Buffer{ref: ref}, device) when is_reference(ref) and is_binary(device) do
    with {:ok, out} <- Native.to_device(ref, device) do
      wrap(out)
    else
      error -> error(error)
    end
  end

  def to_device(%Buffer{}, device), do: {:error, Error.new("to_device", "the device must be a device spec string", inspect(device))}
  def to_device(other, _device), do: not_a_buffer("to_device", other)

  @doc "As `to_device/2`, raising `ExCubecl.Error`."
  @spec to_device!(Buffer.t(), String.t()) :: Buffer.t()
  def to_device!(buffer, device), do: bang(to_device(buffer, device))

  # ---------------------------------------------------------------------------------------
  # Helpers

  @doc false
  def wrap(ref) do
    case Buffer.wrap(ref) do
      %Buffer{} = b -> {:ok, b}
      error -> error(error)
    end
  end

  defp wrap_all(refs), do: map_ok(refs, &wrap/1)

  # `fun` over `list` while it gives `{:ok, value}`: the values, or the first error.
  defp map_ok(list, fun) do
    Enum.reduce_while(list, {:ok, []}, fn x, {:ok, acc} ->
      case fun.(x) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, values} -> {:ok, Enum.reverse(values)}
      error -> error
    end
  end

  @doc false
  def refs(op, inputs) when is_list(inputs) do
    map_ok(inputs, fn
      %Buffer{ref: ref} when is_reference(ref) -> {:ok, ref}
      other -> {:error, Error.new(op, "inputs must be ExCubecl buffers", inspect(other, limit: 5))}
    end)
  end

  def refs(op, other), do: {:error, Error.new(op, "inputs must be a list of buffers", inspect(other, limit: 5))}

  defp with_ref(_op, %Buffer{ref: ref}, fun) when is_reference(ref) do
    case fun.(ref) do
      {:ok, value} -> {:ok, value}
      error -> error(error)
    end
  end

  defp with_ref(op, other, _fun), do: not_a_buffer(op, other)

  defp not_a_buffer(op, other), do: {:error, Error.new(op, "expects an ExCubecl buffer", inspect(other, limit: 5))}

  defp host_binary(data, _dtype) when is_binary(data), do: {:ok, data}

  defp host_binary(data, dtype) when is_list(data) do
    case Host.encode(List.flatten(data), dtype) do
      {:ok, bin} -> {:ok, bin}
      {:error, why} -> {:error, Error.new("buffer", why, "dtype #{dtype}")}
    end
  end

  defp host_binary(data, _dtype), do: {:error, Error.new("buffer", "data must be a binary or a list of numbers", inspect(data, limit: 5))}

  defp check_dtype(_op, dtype) when dtype in @dtypes, do: :ok

  defp check_dtype(op, dtype),
    do: {:error, Error.new(op, "unknown dtype #{inspect(dtype)}", "dtypes: #{Enum.map_join(@dtypes, ", ", &inspect/1)}")}

  defp check_shape(op, shape) do
    if is_list(shape) and Enum.all?(shape, &(is_integer(&1) and &1 >= 0 and &1 < 4_611_686_018_427_387_904)) do
      :ok
    else
      {:error, Error.new(op, "a shape is a list of non-negative integers", inspect(shape, limit: 10))}
    end
  end

  defp check_name(_op, name) when is_atom(name) or is_binary(name), do: :ok
  defp check_name(op, name), do: {:error, Error.new(op, "a kernel name is an atom or a string", inspect(name))}

  defp check_opts(op, opts) do
    if Keyword.keyword?(opts), do: :ok, else: {:error, Error.new(op, "options must be a keyword list", inspect(opts, limit: 5))}
  end

  defp device_opt(op, opts) do
    case Keyword.get(opts, :device) do
      nil -> {:ok, default_device()}
      d when is_binary(d) -> {:ok, d}
      d when is_atom(d) -> {:ok, Atom.to_string(d)}
      {runtime, index} when is_atom(runtime) and is_integer(index) -> {:ok, "#{runtime}:#{index}"}
      other -> {:error, Error.new(op, "a device is a string such as \"cuda:0\" or \"wgpu\"", inspect(other))}
    end
  end

  defp error({:error, %Error{} = e}), do: {:error, e}
  defp error({:error, %{op: _, reason: _, details: _} = e}), do: {:error, Error.from(e)}
  defp error({:error, other}), do: {:error, Error.new("ex_cubecl", inspect(other), "")}
  defp error(other), do: {:error, Error.new("ex_cubecl", "unexpected result #{inspect(other, limit: 5)}", "")}

  @doc false
  def bang({:ok, value}), do: value
  def bang({:error, %Error{} = e}), do: raise(e)
  def bang(other), do: other |> error() |> bang()
end
