# The cost of a call from Elixir against the same op in Rust on the same device.
#
#     cd nif/ex_cubecl
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/call_overhead.exs
#
# The Rust column is the benchmark crate's own rows on the same device:
#     cargo bench -p ex_cubecl_benches -- --filter "tiny add"    # 16-element add + sync
#     cargo bench -p ex_cubecl_benches -- --filter "matmul"      # includes 1024^2 f32 on GPUs
#
# Rows (medians; every timed call ends in a device sync, so queued work is counted):
# - a 16-element f32 add + sync, from Elixir (buffer already on the device);
# - a 1024x1024 f32 matmul + sync;
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

a = ExCubecl.run_kernel!(:random_uniform, [], shape: [1024, 1024]) |> hd()

matmul = fn ->
  [y] = ExCubecl.run_kernel!(:matmul, [a, a])
  :ok = ExCubecl.synchronize()
  y
end

IO.puts("matmul 1024^2 f32 + sync: #{Bench.median(matmul, 20)} us")

for {name, fun} <- [shape: fn -> ExCubecl.Native.shape(x.ref) end, dtype: fn -> ExCubecl.Native.dtype(x.ref) end] do
  IO.puts("#{name} (normal scheduler): #{Bench.median(fun, 10_000)} us")
end

free = fn ->
  b = ExCubecl.buffer!([1.0], [1], :f32)
  {t, _} = :timer.tc(fn -> ExCubecl.Native.free(b.ref) end)
  t
end

IO.puts("free (normal scheduler): #{Enum.at(Enum.sort(for _ <- 1..2000, do: free.()), 1000)} us")
