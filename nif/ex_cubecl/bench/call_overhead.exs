# The cost of a call from Elixir against the same op in Rust on the same device.
#
#     cd nif/ex_cubecl
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/call_overhead.exs
#
# The Rust column is the benchmark crate's own rows on the same device:
#     cargo bench -p ex_cubecl_benches -- --filter "tiny add"    # 16-element add + sync
#     cargo bench -p ex_cubecl_benches -- --filter "matmul f32"  # 4096^2 on GPUs (TF32)
#
# Rows (medians; every timed call ends in a device sync, so queued work is counted):
# - a 16-element f32 add + sync, from Elixir (buffer already on the device);
# - f32 matmuls + sync: 1024x1024, and on a GPU 4096x4096 (the Rust row's size); exact f32 unless
#   EX_CUBECL_MATMUL_PRECISION=tf32 (the Rust benchmark uses TF32);
# - the metadata NIFs that run on normal schedulers (shape, dtype, free), to show they stay
#   far under the ~1 ms a normal scheduler may be held.
defmodule Bench do
  def median(fun, iters) do
    for(_ <- 1..5, do: fun.())
    times = for _ <- 1..iters, do: elem(:timer.tc(fun), 0)
    Enum.at(Enum.sort(times), div(iters, 2))
  end
end

device = ExCubecl.default_device()
IO.puts("device: #{device} (#{inspect(ExCubecl.device_info().name)})")
x = ExCubecl.buffer!(Enum.map(1..16, &(&1 * 1.0)), [16], :f32)

add = fn ->
  [y] = ExCubecl.run_kernel!(:add, [x, x])
  :ok = ExCubecl.synchronize()
  y
end

IO.puts("add 16 f32 + sync: #{Bench.median(add, 2000)} us")

# Where the time of that call goes: the kernel NIF alone (the launch is queued, not waited
# for), and a sync of an idle device (the dirty-scheduler round trip and cubecl's sync).
device_str = x.device
launch = fn -> ExCubecl.Native.run_kernel("add", [x.ref, x.ref], [], device_str) end
IO.puts("  run_kernel NIF alone (add 16, no sync): #{Bench.median(launch, 2000)} us")
:ok = ExCubecl.synchronize()
idle_sync = fn -> ExCubecl.Native.synchronize(device_str) end
IO.puts("  synchronize NIF, idle device: #{Bench.median(idle_sync, 2000)} us")

# 1024^2 everywhere; 4096^2 on a GPU too, the size of the Rust benchmark's full-size row.
sizes = if ExCubecl.gpu?(), do: [1024, 4096], else: [1024]
precision = System.get_env("EX_CUBECL_MATMUL_PRECISION") || "exact"

for n <- sizes do
  a = ExCubecl.run_kernel!(:random_uniform, [], shape: [n, n]) |> hd()

  matmul = fn ->
    [y] = ExCubecl.run_kernel!(:matmul, [a, a])
    :ok = ExCubecl.synchronize()
    y
  end

  us = Bench.median(matmul, 20)
  IO.puts("matmul #{n}^2 f32 (#{precision}) + sync: #{us} us (#{Float.round(2 * n * n * n / us / 1.0e6, 2)} TFLOP/s)")
end

for {name, fun} <- [shape: fn -> ExCubecl.Native.shape(x.ref) end, dtype: fn -> ExCubecl.Native.dtype(x.ref) end] do
  IO.puts("#{name} (normal scheduler): #{Bench.median(fun, 10_000)} us")
end

free = fn ->
  b = ExCubecl.buffer!([1.0], [1], :f32)
  {t, _} = :timer.tc(fn -> ExCubecl.Native.free(b.ref) end)
  t
end

IO.puts("free (normal scheduler): #{Enum.at(Enum.sort(for _ <- 1..2000, do: free.()), 1000)} us")
