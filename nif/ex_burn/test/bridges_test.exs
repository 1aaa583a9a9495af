defmodule ExBurn.BridgesTest do
  # ExBurn.BurnBridge, ExBurn.NifHelper, ExBurn.CubeclBridge and ExBurn.Error as 004
  # documents them: each documented example as written (synthetic data where it leaves
  # variables undefined), results checked against Nx.BinaryBackend, and the errors.
  use ExUnit.Case, async: false

  alias ExBurn.{BurnBridge, CubeclBridge, NifHelper}
  alias ExBurn.Tensor, as: BT

  doctest ExBurn.BurnBridge
  doctest ExBurn.NifHelper

  defp host(%BT{} = t) do
    {:ok, nx} = BT.to_nx(t)
    nx
  end

  defp close?(got, want), do: Nx.all_close(host(got), want, atol: 1.0e-5) |> Nx.to_number() == 1

  describe "BurnBridge" do
    test "004's 'Using BurnBridge Directly', as written" do
      t1 = ExBurn.BurnBridge.zeros([3, 3], :f32)
      t2 = ExBurn.BurnBridge.ones([3, 3], :f32)
      t3 = ExBurn.BurnBridge.add(t1, t2)
      t4 = ExBurn.BurnBridge.matmul(t1, t2)
      t5 = ExBurn.BurnBridge.relu(t3)
      {:ok, nx_tensor} = ExBurn.BurnBridge.to_nx(t3)

      assert Nx.to_flat_list(nx_tensor) == List.duplicate(1.0, 9)
      assert Nx.to_flat_list(host(t4)) == List.duplicate(0.0, 9)
      assert Nx.to_flat_list(host(t5)) == List.duplicate(1.0, 9)
      for t <- [t1, t2, t3, t4, t5], do: assert(%BT{shape: [3, 3], type: :f32} = t)
    end

    test "every op against Nx.BinaryBackend" do
      a = Nx.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, 0.5]], backend: Nx.BinaryBackend)
      b = Nx.tensor([[0.5, 1.0, -1.0], [2.0, 0.25, 4.0]], backend: Nx.BinaryBackend)
      {:ok, ba} = BT.from_nx(a)
      {:ok, bb} = BT.from_nx(b)

      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        assert close?(BurnBridge.add(ba, bb), Nx.add(a, b))
        assert close?(BurnBridge.sub(ba, bb), Nx.subtract(a, b))
        assert close?(BurnBridge.mul(ba, 2), Nx.multiply(a, 2))
        assert close?(BurnBridge.div(ba, bb), Nx.divide(a, b))
        assert close?(BurnBridge.pow(BurnBridge.abs(ba), 2), Nx.pow(Nx.abs(a), 2))
        assert close?(BurnBridge.neg(ba), Nx.negate(a))
        assert close?(BurnBridge.exp(ba), Nx.exp(a))
        assert close?(BurnBridge.log(BurnBridge.abs(ba)), Nx.log(Nx.abs(a)))
        assert close?(BurnBridge.sqrt(BurnBridge.abs(ba)), Nx.sqrt(Nx.abs(a)))
        assert close?(BurnBridge.sigmoid(ba), Nx.sigmoid(a))
        assert close?(BurnBridge.tanh(ba), Nx.tanh(a))
        assert close?(BurnBridge.relu(ba), Nx.max(a, 0))
        exp = Nx.exp(Nx.subtract(a, Nx.reduce_max(a, axes: [1], keep_axes: true)))
        assert close?(BurnBridge.softmax(ba, 1), Nx.divide(exp, Nx.sum(exp, axes: [1], keep_axes: true)))
        centered = Nx.subtract(a, Nx.mean(a, axes: [1], keep_axes: true))
        var = Nx.mean(Nx.multiply(centered, centered), axes: [1], keep_axes: true)
        assert close?(BurnBridge.layer_norm(ba, -1, 1.0e-5), Nx.divide(centered, Nx.sqrt(Nx.add(var, 1.0e-5))))
        assert close?(BurnBridge.matmul(ba, BurnBridge.transpose(bb)), Nx.dot(a, Nx.transpose(b)))
        assert close?(BurnBridge.dot(ba, BurnBridge.transpose(bb, 0, 1)), Nx.dot(a, Nx.transpose(b)))
        assert close?(BurnBridge.reshape(ba, [3, 2]), Nx.reshape(a, {3, 2}))
        assert close?(BurnBridge.broadcast(BurnBridge.tensor([1.0, 2.0, 3.0]), [2, 3]), Nx.broadcast(Nx.tensor([1.0, 2.0, 3.0]), {2, 3}))
        assert close?(BurnBridge.concat(ba, bb), Nx.concatenate([a, b]))
        assert close?(BurnBridge.concat([ba, bb], 1), Nx.concatenate([a, b], axis: 1))
        assert close?(BurnBridge.slice(ba, [{0, 1}, 1..2]), Nx.slice(a, [0, 1], [1, 2]))
        assert close?(BurnBridge.sum(ba), Nx.sum(a))
        assert close?(BurnBridge.sum(ba, [1]), Nx.sum(a, axes: [1]))
        assert close?(BurnBridge.mean(ba, 0), Nx.mean(a, axes: [0]))
        assert close?(BurnBridge.max(ba), Nx.reduce_max(a))
        assert close?(BurnBridge.min(ba, [0]), Nx.reduce_min(a, axes: [0]))
        x = Nx.iota({1, 2, 4, 4}, type: :f32) |> Nx.divide(10)
        k = Nx.iota({3, 2, 2, 2}, type: :f32) |> Nx.subtract(5)
        {:ok, bx} = BT.from_nx(x)
        {:ok, bk} = BT.from_nx(k)
        assert close?(BurnBridge.conv2d(bx, bk, 2, 1), Nx.conv(x, k, strides: [2, 2], padding: [{1, 1}, {1, 1}]))
      end)

      assert Nx.to_list(host(BurnBridge.eye(2, :f32))) == [[1.0, 0.0], [0.0, 1.0]]
      assert Nx.to_list(host(BurnBridge.iota([2, 3], 1, :i32))) == [[0, 1, 2], [0, 1, 2]]
      assert Nx.to_list(host(BurnBridge.full([2], 7, :i64))) == [7, 7]
      r = BurnBridge.random([1000], :f32, -2.0, 3.0)
      values = Nx.to_flat_list(host(r))
      assert Enum.all?(values, &(&1 >= -2.0 and &1 < 3.0))
      assert length(Enum.uniq(values)) > 900
      assert BurnBridge.shape(ba) == [2, 3]
      assert BurnBridge.to_binary(ba) == Nx.to_binary(a)
      assert BurnBridge.device(ba) == ExBurn.default_device_spec()
    end

    test "integer tensors keep Burn integer types" do
      i = BurnBridge.tensor([[1, 2], [3, 4]])
      assert i.type == :i32
      assert BurnBridge.matmul(i, i) |> host() |> Nx.to_list() == [[7, 10], [15, 22]]
      sum = BurnBridge.sum(i)
      assert sum.type in [:i32, :i64] and Nx.to_number(host(sum)) == 10
    end

    test "devices: to_cpu, to_gpu where there is one, to_gpu's error where there is none" do
      t = BurnBridge.ones([2], :f32)
      cpu = BurnBridge.to_cpu(t)
      assert BurnBridge.device(cpu) == ExBurn.device_spec(:cpu)

      if ExBurn.gpu_available?() do
        gpu = BurnBridge.to_gpu(t)
        assert BurnBridge.device(gpu) == ExBurn.device_spec(:gpu)
        assert Nx.to_list(host(gpu)) == [1.0, 1.0]
      else
        assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.to_gpu: device :gpu: no GPU/, fn -> BurnBridge.to_gpu(t) end
      end

      assert BurnBridge.free(t) == :ok
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.add: .*freed/, fn -> BurnBridge.add(t, t) end
    end

    test "bad calls raise ExBurn.Error naming the op, the shapes and the types" do
      a = BurnBridge.ones([2, 3], :f32)
      e = assert_raise ExBurn.Error, fn -> BurnBridge.matmul(a, a) end
      assert e.op == "ExBurn.BurnBridge.matmul"
      assert Exception.message(e) =~ "f32[2, 3]"
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.add: .*f32\[2, 3\], f32\[4\]/, fn -> BurnBridge.add(a, BurnBridge.ones([4], :f32)) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.reshape: /, fn -> BurnBridge.reshape(a, [4]) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.zeros: .*unknown Burn type :u8/, fn -> BurnBridge.zeros([2], :u8) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.softmax: dim 5 is out of range/, fn -> BurnBridge.softmax(a, 5) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.slice: range \{0, 9\} does not fit/, fn -> BurnBridge.slice(a, [{0, 9}]) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.relu: expects a tensor/, fn -> BurnBridge.relu(:nope) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.random: random values are of a float type/, fn -> BurnBridge.random([2], :i32) end
      assert_raise ExBurn.Error, ~r/^ExBurn.BurnBridge.conv2d: expects input/, fn -> BurnBridge.conv2d(a, a) end
      # The VM lives and good calls still work.
      assert Nx.to_flat_list(host(BurnBridge.add(a, a))) == List.duplicate(2.0, 6)
    end
  end

  describe "NifHelper" do
    test "every documented function returns {:ok, result} on good input" do
      {:ok, a} = NifHelper.new_tensor(<<1.0::float-32-native, 4.0::float-32-native, 9.0::float-32-native, 16.0::float-32-native>>, [2, 2], :f32)
      {:ok, b} = NifHelper.ones_tensor([2, 2], :f32)
      ref = BT.ref(a)

      calls = [
        abs_tensor: [a],
        add_tensor: [a, b],
        broadcast_tensor: [b, [3, 2, 2]],
        concat_tensor: [a, b],
        div_tensor: [a, b],
        dot_tensor: [a, b],
        exp_tensor: [a],
        eye_tensor: [2, :f32],
        iota_tensor: [[2, 2], 0, :i32],
        layer_norm_tensor: [a, 1, 1.0e-5],
        log_tensor: [a],
        matmul_tensor: [a, b],
        max_tensor: [a],
        max_tensor: [a, [0]],
        mean_tensor: [a],
        mean_tensor: [a, [1]],
        min_tensor: [a],
        min_tensor: [a, [1]],
        mul_tensor: [a, b],
        neg_tensor: [a],
        ones_tensor: [[2], :i64],
        pow_tensor: [a, 2],
        random_tensor: [[4], :f32, 0.0, 1.0],
        relu_tensor: [a],
        reshape_tensor: [a, [4]],
        sigmoid_tensor: [a],
        slice_tensor: [ref, [{0, 1}]],
        softmax_tensor: [a, 1],
        sqrt_tensor: [a],
        sub_tensor: [a, b],
        sum_tensor: [a],
        sum_tensor: [a, [0]],
        tanh_tensor: [a],
        to_cpu: [a],
        transpose_tensor: [a],
        transpose_tensor: [a, 0, 1],
        zeros_tensor: [[1, 2], :f32]
      ]

      for {fun, args} <- calls do
        assert {:ok, %BT{}} = apply(NifHelper, fun, args), "#{fun}/#{length(args)}"
      end

      {:ok, x} = NifHelper.new_tensor(<<0::32, 0::32, 0::32, 0::32>>, [1, 1, 2, 2], :f32)
      assert {:ok, %BT{shape: [1, 1, 1, 1]}} = NifHelper.conv2d_tensor(x, x, 1, 0)
      assert {:ok, %BT{}} = NifHelper.slice_tensor(ref, [0..0])
      assert {:ok, [2, 2]} = NifHelper.tensor_shape(ref)
      assert {:ok, bin} = NifHelper.tensor_to_binary(a)
      assert bin == <<1.0::float-32-native, 4.0::float-32-native, 9.0::float-32-native, 16.0::float-32-native>>
      assert {:ok, sqrt} = NifHelper.sqrt_tensor(a)
      assert Nx.to_list(host(sqrt)) == [[1.0, 2.0], [3.0, 4.0]]
      assert {:ok, gpu?} = NifHelper.gpu_available()
      assert gpu? == ExBurn.gpu_available?()
      assert {:ok, name} = NifHelper.device_name()
      assert name == ExBurn.device_name()

      if gpu?, do: assert({:ok, %BT{}} = NifHelper.to_gpu(a)), else: assert({:error, "ExBurn.BurnBridge.to_gpu: device :gpu: no GPU" <> _} = NifHelper.to_gpu(a))

      assert {:ok, true} = NifHelper.free_tensor(b)
      assert {:ok, false} = NifHelper.free_tensor(b)
    end

    test "bad calls return {:error, reason} naming the op" do
      {:ok, a} = NifHelper.ones_tensor([2, 3], :f32)
      assert {:error, "ExBurn.BurnBridge.matmul: " <> _} = NifHelper.matmul_tensor(a, a)
      assert {:error, "ExBurn.BurnBridge.add: " <> _} = NifHelper.add_tensor(a, :x)
      assert {:error, "ExBurn.BurnBridge.reshape: " <> _} = NifHelper.reshape_tensor(a, [7])
      assert {:error, "ExBurn.Tensor.from_binary: " <> _} = NifHelper.new_tensor(<<1>>, [1], :f32)
      assert {:error, "ExBurn.Tensor.from_binary: " <> _} = NifHelper.new_tensor(<<1>>, [1], :u8)
      assert {:error, "free_tensor: expects a tensor" <> _} = NifHelper.free_tensor(:nope)
      assert {:error, _} = NifHelper.tensor_shape(:nope)
    end
  end

  describe "CubeclBridge" do
    # 004's usage example as written, the `if available?()` block run on the device this
    # machine has (:metal where there is a Metal adapter, else the Vulkan one, else wgpu's).
    test "004's usage example" do
      backend = Enum.find([:metal, :vulkan, :wgpu], &match?({:ok, _}, ExBurn.CubeclBridge.init(&1)))
      assert ExBurn.CubeclBridge.available?() == ExBurn.gpu_available?()

      {:ok, ctx} = ExBurn.CubeclBridge.init(backend)
      caps = ExBurn.CubeclBridge.device_capabilities(ctx)
      {:ok, buf} = ExBurn.CubeclBridge.allocate_gpu(ctx, [4, 4], :f32)
      {:ok, result} = ExBurn.CubeclBridge.execute(ctx, :add, [buf, buf])
      {:ok, pid} = ExBurn.CubeclBridge.pipeline()
      :ok = ExBurn.CubeclBridge.pipeline_add(pid, :add, [buf, buf], buf)
      :ok = ExBurn.CubeclBridge.pipeline_add(pid, :relu, [buf], buf)
      {:ok, commands} = ExBurn.CubeclBridge.pipeline_run(pid)
      :ok = ExBurn.CubeclBridge.pipeline_free(pid)

      assert %{device: device, dtypes: dtypes} = caps
      assert device == ctx.device and :f32 in dtypes
      assert {:ok, [4, 4]} = ExBurn.CubeclBridge.buffer_shape(result)
      assert length(commands) == 2
      for id <- commands, do: assert({:ok, :completed} = ExBurn.CubeclBridge.async_poll(id))
      assert {:ok, [_]} = ExBurn.CubeclBridge.async_wait(hd(commands))
    end

    test "pipelines write their outputs in order, and replay on the buffers' new values" do
      {:ok, ctx} = CubeclBridge.init(:cpu)
      {:ok, buf} = CubeclBridge.host_to_device(ctx, Nx.tensor([-1.0, 2.0, -3.0]))
      {:ok, out} = CubeclBridge.allocate_gpu(ctx, [3], :f32)
      {:ok, p} = CubeclBridge.pipeline()
      :ok = CubeclBridge.pipeline_add(p, :add, [buf, buf], buf)
      :ok = CubeclBridge.pipeline_add(p, :relu, [buf], out)
      :ok = CubeclBridge.pipeline_add_struct(p, ExCubecl.Command.run_kernel(:mul, [out, buf], buf))
      {:ok, [id1, _id2, _id3]} = CubeclBridge.pipeline_run(p)
      # buf = 2 buf; out = relu(buf); buf = out * buf
      assert {:ok, host} = CubeclBridge.device_to_host(ctx, buf)
      assert Nx.to_list(host) == [0.0, 16.0, 0.0]
      assert {:ok, o} = CubeclBridge.device_to_host(ctx, out)
      assert Nx.to_list(o) == [0.0, 4.0, 0.0]
      assert {:ok, [first]} = CubeclBridge.async_wait(id1)
      assert {:ok, [-2.0, 4.0, -6.0]} = ExCubecl.to_list(first)
      # A second run replays on the new values.
      {:ok, [_, _, _]} = CubeclBridge.pipeline_run(p)
      assert ExCubecl.to_list!(buf) == [0.0, 1024.0, 0.0]
      assert :ok = CubeclBridge.pipeline_free(p)
      assert {:error, %ExCubecl.Error{op: "pipeline_run"}} = CubeclBridge.pipeline_run(p)
    end

    test "every other documented function" do
      {:ok, ctx} = CubeclBridge.init(:cpu)
      assert ctx.kind == :cpu
      assert {:ok, names} = CubeclBridge.kernels()
      assert "add" in names and "relu" in names
      assert {:ok, ref} = CubeclBridge.compile_kernel(ctx, :softmax, [])
      assert is_reference(ref)
      assert {:error, "compile_kernel: unknown kernel :nope" <> _} = CubeclBridge.compile_kernel(ctx, :nope, [])
      assert :vulkan in CubeclBridge.available_backends() or :metal in CubeclBridge.available_backends()
      assert :wgpu in CubeclBridge.available_backends()
      assert CubeclBridge.cuda_available?() == (:cuda in CubeclBridge.available_backends())
      assert {:ok, n} = CubeclBridge.device_count()
      assert n == Enum.count(ExCubecl.devices(), &(&1.kind == :gpu))
      assert CubeclBridge.device_summary() =~ ExCubecl.device_info().name
      assert :f32 in CubeclBridge.supported_dtypes()
      assert CubeclBridge.version() == ExCubecl.version()

      {:ok, buf} = CubeclBridge.host_to_device(ctx, Nx.tensor([[1, 2], [3, 4]], type: :s32))
      assert {:ok, "s32"} = CubeclBridge.buffer_dtype(buf)
      assert {:ok, [2, 2]} = CubeclBridge.buffer_shape(buf)
      assert {:ok, 16} = CubeclBridge.buffer_size(buf)
      assert {:ok, <<1::32-native, 2::32-native, 3::32-native, 4::32-native>>} = CubeclBridge.buffer_read(buf)
      assert byte_size(CubeclBridge.buffer_read!(buf)) == 16
      assert {:ok, softmax} = CubeclBridge.execute(ctx, :softmax, [elem(CubeclBridge.host_to_device(ctx, Nx.tensor([0.0, 0.0])), 1)], axis: 0)
      assert ExCubecl.to_list!(softmax) == [0.5, 0.5]
      assert {:ok, z} = CubeclBridge.execute(ctx, :zeros, [], shape: [2], dtype: "f32")
      assert ExCubecl.to_list!(z) == [0.0, 0.0]

      {:ok, big} = CubeclBridge.allocate_gpu(ctx, [256, 1024], :f32)
      :ok = CubeclBridge.synchronize(ctx)
      assert CubeclBridge.memory_used(ctx) >= 1_048_576
      assert CubeclBridge.memory_total(ctx) >= CubeclBridge.memory_used(ctx)
      assert {:ok, %{total: total, used: used, free: free}} = CubeclBridge.memory_info()
      assert total >= used and free == total - used
      assert :ok = CubeclBridge.free(ctx, big)
      assert {:error, %ExCubecl.Error{reason: "the tensor was freed"}} = CubeclBridge.buffer_read(big)

      x = ExCubecl.buffer!([4.0, 9.0], [2], :f32)
      {:ok, id} = CubeclBridge.async_submit(ExCubecl.Command.run_kernel(:sqrt, [x], x))
      assert {:ok, :completed} = CubeclBridge.async_poll(id)
      assert {:ok, [^x]} = CubeclBridge.async_wait(id)
      assert ExCubecl.to_list!(x) == [2.0, 3.0]
      assert {:error, _} = CubeclBridge.async_wait(id)
      assert :ok = CubeclBridge.destroy(ctx)
    end

    test "bad calls return errors naming the function" do
      assert {:error, "init: ROCm is not compiled into this build" <> _} = CubeclBridge.init(:rocm)
      assert {:error, "init: unknown backend :tpu" <> _} = CubeclBridge.init(:tpu)

      unless Enum.any?(ExCubecl.devices(), &(&1.api == "metal")),
        do: assert({:error, "init: no Metal adapter (devices: " <> _} = CubeclBridge.init(:metal))

      {:ok, ctx} = CubeclBridge.init(:cpu)
      assert {:error, "allocate_gpu: unknown type :f8" <> _} = CubeclBridge.allocate_gpu(ctx, [2], :f8)
      assert {:error, "allocate_gpu: " <> _} = CubeclBridge.allocate_gpu(ctx, [-1], :f32)
      a = ExCubecl.buffer!([1.0, 2.0], [2], :f32)
      b = ExCubecl.buffer!([1.0, 2.0, 3.0], [3], :f32)
      assert {:error, "execute: add: " <> _} = CubeclBridge.execute(ctx, :add, [a, b])
      assert {:error, "execute: " <> _} = CubeclBridge.execute(ctx, :nope, [a])
      {:ok, p} = CubeclBridge.pipeline()
      assert {:error, %ExCubecl.Error{op: "pipeline_add", reason: "unknown kernel \"nope\""}} = CubeclBridge.pipeline_add(p, :nope, [a], a)
      assert {:error, %ExCubecl.Error{op: "pipeline_run", reason: "the pipeline has no commands"}} = CubeclBridge.pipeline_run(p)
      # An output buffer of another shape than the result: an error at the run.
      :ok = CubeclBridge.pipeline_add(p, :add, [a, a], b)
      assert {:error, %ExCubecl.Error{op: "add", reason: "the output buffer must have the result's shape" <> _}} = CubeclBridge.pipeline_run(p)
      assert {:error, %ExCubecl.Error{op: "submit"}} = CubeclBridge.async_submit(:nope)
      assert {:error, "device_to_host: expects" <> _} = CubeclBridge.device_to_host(ctx, :nope)
      assert {:error, "host_to_device: expects an Nx tensor" <> _} = CubeclBridge.host_to_device(ctx, [1])
    end
  end

  describe "Error" do
    test "004's examples: raise with fields, from_tuple, new, format_error" do
      e =
        assert_raise ExBurn.Error, fn ->
          raise ExBurn.Error,
            op: :matmul,
            reason: "shape mismatch",
            details: %{lhs: [3, 4], rhs: [5, 6]}
        end

      assert %ExBurn.Error{op: :matmul, reason: "shape mismatch", details: %{lhs: [3, 4], rhs: [5, 6]}} = e
      assert Exception.message(e) == "matmul: shape mismatch (%{lhs: [3, 4], rhs: [5, 6]})"
      assert ExBurn.Error.format_error(e) == Exception.message(e)
      assert ExBurn.Error.to_string(e) == Exception.message(e)
      assert "#{e}" == Exception.message(e)

      assert ExBurn.Error.from_tuple({:error, "something failed"}, op: :forward) ==
               %ExBurn.Error{op: :forward, reason: "something failed", details: nil}

      # 004 writes `reason: %{"bad input"}`, which is not Elixir; the string is meant.
      assert ExBurn.Error.new(op: :add, reason: "bad input") == %ExBurn.Error{op: :add, reason: "bad input", details: nil}

      assert %ExBurn.Error{op: :read, reason: "read: the tensor was freed"} =
               ExBurn.Error.from_tuple({:error, ExCubecl.Error.new("read", "the tensor was freed")}, op: :read)
    end
  end
end
