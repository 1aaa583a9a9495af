# The cost of an Nx call through ExBurn.Backend against the same op in Rust on the same
# device, and a 1024² f32 Nx.dot against Nx.BinaryBackend.
#
#     cd nif/ex_burn
#     EX_CUBECL_PROFILE=release MIX_ENV=prod mix run bench/overhead.exs
#
# The Rust column is the benchmark crate's row on the same device (bench --filter "tiny add":
# a 16-element add + sync). The defn rows run the add compiled by ExBurn.Defn.Compiler on
# the normal and on a dirty scheduler. Medians; every timed call ends in a device sync, so queued work
# is counted. BinaryBackend's dot runs once (it takes tens of seconds).
defmodule Bench do
  def median(fun, iters) do
    for(_ <- 1..5, do: fun.())
    times = for _ <- 1..iters, do: elem(:timer.tc(fun), 0)
    Enum.at(Enum.sort(times), div(iters, 2))
  end
end

Nx.default_backend(ExBurn.Backend)
device = ExBurn.default_device_spec()
IO.puts("device: #{device} (#{inspect(ExBurn.device_name())})")
sync = fn -> :ok = ExCubecl.synchronize(device: device) end

x = Nx.iota({16}, type: :f32)
add = fn -> Nx.add(x, x) |> tap(fn _ -> sync.() end) end
IO.puts("Nx.add 16 f32 + sync: #{Bench.median(add, 2000)} us")
launch = fn -> Nx.add(x, x) end
IO.puts("  Nx.add alone (queued, no sync): #{Bench.median(launch, 2000)} us")
IO.puts("  sync alone, idle device: #{Bench.median(sync, 2000)} us")
mul = fn -> Nx.multiply(x, 2.0) |> tap(fn _ -> sync.() end) end
IO.puts("Nx.multiply by a scalar 16 f32 + sync: #{Bench.median(mul, 2000)} us")

# The same add compiled by ExBurn.Defn.Compiler: a run well under a millisecond goes through
# the NIF on the caller's normal scheduler (issue 52, item 5); `:normal_scheduler_us` 0 sends
# every run to a dirty scheduler, as before.
jitted = Nx.Defn.jit(&Nx.add/2, compiler: ExBurn.Defn.Compiler)
for {label, us} <- [{"normal scheduler", 250}, {"dirty scheduler", 0}] do
  Application.put_env(:ex_burn, :normal_scheduler_us, us)
  run = fn -> jitted.(x, x) |> tap(fn _ -> sync.() end) end
  IO.puts("defn add 16 f32 + sync (#{label}): #{Bench.median(run, 2000)} us")
end
Application.delete_env(:ex_burn, :normal_scheduler_us)

n = 1024
a = Nx.iota({n, n}, type: :f32) |> Nx.divide(n * n)
dot = fn -> Nx.dot(a, a) |> tap(fn _ -> sync.() end) end
device_us = Bench.median(dot, 20)
IO.puts("Nx.dot #{n}^2 f32 on ExBurn + sync: #{device_us} us (#{Float.round(2 * n * n * n / device_us / 1.0e6, 2)} TFLOP/s)")
b = Nx.backend_copy(a, Nx.BinaryBackend)
{binary_us, _} = :timer.tc(fn -> Nx.dot(b, b) end)
IO.puts("Nx.dot #{n}^2 f32 on Nx.BinaryBackend (one run): #{binary_us} us; ExBurn is #{round(binary_us / device_us)}x faster")
