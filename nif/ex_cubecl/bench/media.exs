# Decode + resize + normalise of a batch of JPEG files: ExCubecl (decode on the host by the
# `image` crate, then ExCubecl.Filter on the device) against the CPU (the same decoder, then
# the same bilinear resize and normalisation in Nx.BinaryBackend).
#
#     cd nif/ex_burn     # Nx is a dependency there, not of ex_cubecl
#     MIX_ENV=test mix run ../ex_cubecl/bench/media.exs [--count 256] [--size 96] [--out 64]
#
# StbImage (the usual CPU decoder from Elixir) is not in the offline dependency set of this
# repository, so the CPU side decodes with ExCubecl.Media and reads the pixels back; only the
# filter step differs between the rows. The files are `count` JPEGs of `size` x `size` RGB
# (quality 90), written first into a temporary folder; `out` x `out` is the output size.
# Every timed run ends with the batch on the host (ExCubecl.read!/1 or Nx.to_binary/1).
{opts, _, _} = OptionParser.parse(System.argv(), strict: [count: :integer, size: :integer, out: :integer])
count = Keyword.get(opts, :count, 256)
size = Keyword.get(opts, :size, 96)
out = Keyword.get(opts, :out, 64)
{mean, std} = {[0.485, 0.456, 0.406], [0.229, 0.224, 0.225]}

alias ExCubecl.{Filter, Media}

device = ExCubecl.default_device()

IO.puts(
  "device: #{device} (#{ExCubecl.device_info().name}); #{count} JPEGs of #{size}x#{size}x3 -> #{out}x#{out}x3, f32"
)

dir = Path.join(System.tmp_dir!(), "ex_cubecl_media_bench")
File.rm_rf!(dir)
File.mkdir_p!(dir)

paths =
  for i <- 1..count do
    pixels =
      for y <- 0..(size - 1),
          x <- 0..(size - 1),
          k <- 0..2,
          into: <<>>,
          do: <<rem(x * 3 + y * 5 + k * 60 + i * 7, 256)>>

    path = Path.join(dir, "img_#{i}.jpg")
    :ok = Media.write(ExCubecl.buffer!(pixels, [size, size, 3], :u8), path, quality: 90)
    path
  end

time = fn fun ->
  fun.()
  runs = for _ <- 1..3, do: elem(:timer.tc(fun), 0)
  Enum.min(runs) / 1000
end

# ExCubecl: per file, decode (host) + upload, resize and normalise on the device; one batch.
device_run = fn ->
  images =
    for path <- paths do
      img = path |> Media.read!() |> Filter.resize!({out, out}) |> Filter.normalize!(mean, std)
      hd(ExCubecl.run_kernel!(:reshape, [img], shape: [1, out, out, 3]))
    end

  [batch] = ExCubecl.run_kernel!(:cat, images, axis: 0)
  ExCubecl.read!(batch)
end

# The same, with the filters run once on the batch (the files have one size): decode and
# upload each, concatenate, then to_float, resize and normalise over [count, size, size, 3].
batched_run = fn ->
  images = for path <- paths, do: hd(ExCubecl.run_kernel!(:reshape, [Media.read!(path)], shape: [1, size, size, 3]))
  [batch] = ExCubecl.run_kernel!(:cat, images, axis: 0)
  batch |> Filter.to_float!() |> Filter.resize!({out, out}) |> Filter.normalize!(mean, std) |> ExCubecl.read!()
end

decode_only = fn -> for path <- paths, do: ExCubecl.read!(Media.read!(path)) end

# The same steps on the CPU: half-pixel bilinear weights per axis, as the device's.
axis = fn t, ax, n_out ->
  n_in = elem(Nx.shape(t), ax)

  {lo, hi, f} =
    for j <- 0..(n_out - 1), reduce: {[], [], []} do
      {l, h, w} ->
        pos = max((j + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = min(trunc(pos), n_in - 1)
        {[i0 | l], [min(i0 + 1, n_in - 1) | h], [pos - i0 | w]}
    end

  shape = Tuple.duplicate(1, tuple_size(Nx.shape(t))) |> put_elem(ax, n_out)
  f = f |> Enum.reverse() |> Nx.tensor(type: :f32, backend: Nx.BinaryBackend) |> Nx.reshape(shape)
  a = Nx.take(t, Nx.tensor(Enum.reverse(lo), backend: Nx.BinaryBackend), axis: ax)
  b = Nx.take(t, Nx.tensor(Enum.reverse(hi), backend: Nx.BinaryBackend), axis: ax)
  Nx.add(Nx.multiply(a, Nx.subtract(1.0, f)), Nx.multiply(b, f))
end

cpu_run = fn ->
  mean_t = Nx.tensor(mean, backend: Nx.BinaryBackend)
  std_t = Nx.tensor(std, backend: Nx.BinaryBackend)

  for path <- paths do
    img = Media.read!(path)

    ExCubecl.read!(img)
    |> Nx.from_binary(:u8, backend: Nx.BinaryBackend)
    |> Nx.reshape({size, size, 3})
    |> Nx.as_type(:f32)
    |> axis.(0, out)
    |> axis.(1, out)
    |> Nx.divide(255.0)
    |> Nx.subtract(mean_t)
    |> Nx.divide(std_t)
  end
  |> Nx.stack()
  |> Nx.to_binary()
end

t_decode = time.(decode_only)
t_device = time.(device_run)
t_batched = time.(batched_run)
rate = fn ms -> "#{Float.round(ms, 1)} ms, #{Float.round(count / ms * 1000, 1)} images/s" end
IO.puts("decode only (image crate, upload and read back): #{rate.(t_decode)}")
IO.puts("ExCubecl, filters per image (decode + resize + normalise on #{device}): #{rate.(t_device)}")
IO.puts("ExCubecl, filters on the batch: #{rate.(t_batched)}")
t_cpu = time.(cpu_run)
IO.puts("CPU (same decode, Nx.BinaryBackend resize + normalise): #{rate.(t_cpu)}")

IO.puts(
  "speed-up over the CPU: #{Float.round(t_cpu / t_device, 1)}x per image, #{Float.round(t_cpu / t_batched, 1)}x batched"
)

File.rm_rf!(dir)
