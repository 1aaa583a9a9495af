defmodule ExBurn.TrainingFaultsTest do
  # A device allocation refused in the middle of training (ExCubecl.put_allocation_limit/1 set
  # between two steps, low enough to refuse the step's activations but not its inputs; the
  # step takes a batch of a new size, so that its program is captured, and allocates, anew: a
  # replay reuses the buffers of its capture and allocates only its outputs): the
  # step raises ExBurn.Error naming the operation, the model and its optimizer state from
  # before the step are intact, and once the limit is lifted training goes on and ends where
  # an uninterrupted run ends, bit for bit. Not async: the limit holds for the whole node.
  use ExUnit.Case, async: false
  @moduletag :capture_log

  alias ExBurn.{Model, Training}

  setup do
    on_exit(fn -> ExCubecl.put_allocation_limit(nil) end)
  end

  defp batch(seed, rows \\ 16) do
    {values, _} = Enum.map_reduce(1..(rows * 8), :rand.seed_s(:exsss, seed), fn _, s -> :rand.uniform_s(s) end)
    x = values |> Nx.tensor(type: :f32) |> Nx.reshape({rows, 8}) |> Nx.backend_transfer(ExBurn.Backend)
    labels = x |> Nx.sum(axes: [1]) |> Nx.greater(4.0)
    {x, Nx.stack([Nx.subtract(1, labels), labels], axis: 1) |> Nx.as_type(:f32)}
  end

  # Every parameter's bytes, read back, by name.
  defp snapshot(model), do: Map.new(Model.parameters(model), fn {name, t} -> {name, Nx.to_binary(t)} end)

  test "a step refused an allocation leaves the model as it was; lifted, training ends as if nothing happened" do
    # 8 -> 256 -> 2: the hidden activations of the third batch (24 x 256 f32, 24 KiB) are its
    # step's largest buffers; the batch and the parameters (8 KiB at most) are on the device.
    model =
      Axon.input("x", shape: {nil, 8})
      |> Axon.dense(256, activation: :relu)
      |> Axon.dense(2)
      |> Model.compile(loss: :cross_entropy, loss_opts: [from_logits: true], optimizer: :adam, learning_rate: 0.01, seed: 5)

    [b1, b2, b3] = [batch(1), batch(2), batch(3, 24)]
    {_, m1} = Training.train_step(model, b1)
    {_, m2} = Training.train_step(m1, b2)
    before = snapshot(m2)

    :ok = ExCubecl.put_allocation_limit(12 * 1024)
    error = assert_raise ExBurn.Error, fn -> Training.train_step(m2, b3) end
    assert Exception.message(error) =~ "the allocation limit"
    :ok = ExCubecl.put_allocation_limit(nil)

    assert snapshot(m2) == before, "the model from before the refused step changed"
    {_, resumed} = Training.train_step(m2, b3)
    # The same three steps again, without a fault.
    {_, straight} = model |> Training.train_step(b1) |> elem(1) |> Training.train_step(b2) |> elem(1) |> Training.train_step(b3)
    assert snapshot(resumed) == snapshot(straight), "the step after the fault differs from the uninterrupted one"
    IO.puts("training faults: 1 allocation refused mid-run (#{String.slice(Exception.message(error), 0, 90)}...), model intact, run resumed exactly")
  end
end
