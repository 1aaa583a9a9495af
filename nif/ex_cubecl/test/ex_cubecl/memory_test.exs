defmodule ExCubecl.MemoryTest do
  # Allocate / free cycles leave memory flat: the device's pools (memory_info) and the OS
  # process's resident memory stay within 5% of their level after a warm-up.
  use ExUnit.Case, async: false
  @moduletag timeout: :infinity

  @cycles 100_000
  @warmup 5_000

  test "#{@cycles} allocate / free cycles with flat memory" do
    cycle = fn i ->
      b = ExCubecl.buffer!([i * 1.0, 2.0, 3.0, 4.0], [2, 2], :f32)
      [c] = ExCubecl.run_kernel!(:add, [b, b])
      {:ok, true} = ExCubecl.free(b)
      {:ok, true} = ExCubecl.free(c)
    end

    Enum.each(1..@warmup, cycle)
    :ok = ExCubecl.synchronize()
    {:ok, before} = ExCubecl.memory_info()
    rss_before = rss()
    Enum.each(1..@cycles, cycle)
    :ok = ExCubecl.synchronize()
    :erlang.garbage_collect()
    {:ok, after_} = ExCubecl.memory_info()
    rss_after = rss()

    IO.puts(
      "\nmemory: #{@cycles} cycles; device pools #{before.bytes_reserved} -> #{after_.bytes_reserved} bytes reserved, " <>
        "#{before.bytes_in_use} -> #{after_.bytes_in_use} in use; resident #{rss_before} -> #{rss_after} kB"
    )

    assert after_.bytes_reserved <= before.bytes_reserved * 1.05 + 4096
    assert after_.bytes_in_use <= before.bytes_in_use * 1.05 + 4096
    assert rss_after <= rss_before * 1.05
  end

  # The OS process's resident set in kB (Linux).
  defp rss do
    "/proc/self/status"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn line ->
      case String.split(line) do
        ["VmRSS:", kb, "kB"] -> String.to_integer(kb)
        _ -> nil
      end
    end)
  end
end
