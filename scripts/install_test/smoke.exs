# The install test's smoke test, run in the user project with `mix run smoke.exs`: the NIF is
# the precompiled one, an Nx op runs on the device, a jitted function runs through the
# compiler, and a tiny fit lowers the loss. Raises on the first failure.
# Axon's loop logs its JIT options at :debug in :dev.
Logger.configure(level: :info)

check = fn ok?, what -> if ok?, do: IO.puts("install test: ok: #{what}"), else: raise("install test: #{what}") end

native = Application.app_dir(:ex_cubecl, "priv/native")
libs = Path.wildcard(Path.join(native, "libex_cubecl_nif-v*-nif-*.so"))
check.(match?([_], libs), "one precompiled library in #{native}: #{inspect(Enum.map(libs, &Path.basename/1))}")
check.(not File.exists?(Application.app_dir(:ex_cubecl, "priv/libex_cubecl_nif.so")), "no source-built library")

# An Nx op on the device.
Nx.default_backend(ExBurn.Backend)
t = Nx.add(Nx.tensor([1.0, 2.0, 3.0]), 1.0)
check.(match?(%ExBurn.Backend{}, t.data) and Nx.to_flat_list(t) == [2.0, 3.0, 4.0], "Nx.add on #{inspect(ExBurn.default_device())}")

# A jitted function.
f = Nx.Defn.jit(fn x, y -> x |> Nx.add(y) |> Nx.multiply(2) end, compiler: ExBurn.Defn.Compiler)
r = f.(Nx.tensor([1.0, 2.0]), Nx.tensor([3.0, 4.0]))
check.(Nx.to_flat_list(r) == [8.0, 12.0], "Nx.Defn.jit with ExBurn.Defn.Compiler")

# A tiny fit: y = 2x + 1 with one dense unit. fit/3 returns the trained model and evaluate/2
# the loss, as the seed documents them; the loss on the data must fall.
x = Nx.iota({16, 1}, type: :f32) |> Nx.divide(16)
y = x |> Nx.multiply(2) |> Nx.add(1)

model =
  Axon.input("x", shape: {nil, 1})
  |> Axon.dense(1)
  |> ExBurn.Model.compile(loss: :mse, optimizer: :sgd, learning_rate: 0.1, seed: 0)

before = ExBurn.Training.evaluate(model, {x, y})

%ExBurn.Model{} = trained = ExBurn.Training.fit(model, {x, y}, epochs: 5, batch_size: 4, verbose: false)

after_ = ExBurn.Training.evaluate(trained, {x, y})
check.(after_ < before, "ExBurn.Training.fit: loss #{Float.round(before, 4)} -> #{Float.round(after_, 4)}")
