defmodule ExCubecl.ConcurrencyTest do
  # Many processes at once: every result correct, no deadlock. Each process runs 1,000 ops
  # (an upload and an add each) that fold its own values into an accumulator on the device,
  # and reads the accumulator at the end: a single op that ran on another process's data, or
  # out of order, changes the sum.
  use ExUnit.Case, async: false
  @moduletag timeout: :infinity

  @processes 64
  @ops 1_000

  test "#{@processes} processes x #{@ops} ops" do
    tasks =
      for p <- 1..@processes do
        Task.async(fn ->
          acc = ExCubecl.buffer!([0, 0], [2], :s32)

          acc =
            Enum.reduce(1..@ops, acc, fn i, acc ->
              x = ExCubecl.buffer!([p, i], [2], :s32)
              [sum] = ExCubecl.run_kernel!(:add, [acc, x])
              sum
            end)

          ExCubecl.to_list!(acc) == [p * @ops, div(@ops * (@ops + 1), 2)]
        end)
      end

    correct = tasks |> Task.await_many(:infinity) |> Enum.count(& &1)
    IO.puts("\nconcurrency: #{@processes} processes x #{@ops} ops (#{@processes * @ops * 2} NIF calls), #{correct} of #{@processes} processes' results correct")
    assert correct == @processes
  end
end
