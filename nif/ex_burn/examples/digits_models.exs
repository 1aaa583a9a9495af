# The Rust job's digits models in Axon, shared by examples/digits.exs and bench/digits_epoch.exs.
defmodule Digits.Models do
  @classes 10

  # The Rust job's Mlp: 64 -> 128 -> 64 -> 10 with ReLU.
  def mlp do
    Axon.input("x", shape: {nil, 64})
    |> Axon.dense(128, activation: :relu)
    |> Axon.dense(64, activation: :relu)
    |> Axon.dense(@classes)
  end

  # The Rust job's Cnn in Axon's channels-last layout: two 3x3 convolutions (8 and 16
  # channels, same padding) with ReLU, a 2x2 max pool (8x8 -> 4x4), then 256 -> 64 -> 10.
  def cnn do
    Axon.input("x", shape: {nil, 64})
    |> Axon.reshape({:batch, 8, 8, 1})
    |> Axon.conv(8, kernel_size: 3, padding: :same, activation: :relu)
    |> Axon.conv(16, kernel_size: 3, padding: :same, activation: :relu)
    |> Axon.max_pool(kernel_size: 2, strides: 2)
    |> Axon.flatten()
    |> Axon.dense(64, activation: :relu)
    |> Axon.dense(@classes)
  end

  def model("mlp"), do: mlp()
  def model("cnn"), do: cnn()
end
