defmodule ExCubecl.Host do
  @moduledoc false
  # Host data: lists of numbers to and from the binary layout of each dtype (native byte
  # order, as the device stores them; bools one byte, 0 or 1).

  @doc "The binary of `values` (a flat list) in `dtype`, or an error naming the first bad value."
  def encode(values, dtype) do
    try do
      {:ok, IO.iodata_to_binary(Enum.map(values, &encode_one(&1, dtype)))}
    rescue
      e in ArgumentError -> {:error, e.message}
    end
  end

  defp encode_one(x, :f32) when is_number(x), do: <<x::float-32-native>>
  defp encode_one(x, :f64) when is_number(x), do: <<x::float-64-native>>
  defp encode_one(x, :f16) when is_number(x), do: <<x::float-16-native>>
  defp encode_one(x, :bf16) when is_number(x), do: bf16(x)
  defp encode_one(x, dtype) when is_atom(x) and dtype in [:f32, :f64, :f16, :bf16], do: special(x, dtype)
  defp encode_one(x, :s8) when is_integer(x), do: <<x::signed-8>>
  defp encode_one(x, :s16) when is_integer(x), do: <<x::signed-16-native>>
  defp encode_one(x, :s32) when is_integer(x), do: <<x::signed-32-native>>
  defp encode_one(x, :s64) when is_integer(x), do: <<x::signed-64-native>>
  defp encode_one(x, :u8) when is_integer(x) and x >= 0, do: <<x::unsigned-8>>
  defp encode_one(x, :u16) when is_integer(x) and x >= 0, do: <<x::unsigned-16-native>>
  defp encode_one(x, :u32) when is_integer(x) and x >= 0, do: <<x::unsigned-32-native>>
  defp encode_one(x, :u64) when is_integer(x) and x >= 0, do: <<x::unsigned-64-native>>
  defp encode_one(x, :bool) when is_boolean(x), do: if(x, do: <<1>>, else: <<0>>)
  defp encode_one(x, :bool) when x in [0, 1], do: <<x>>
  defp encode_one(x, dtype), do: raise(ArgumentError, "#{inspect(x)} is not a #{dtype} value")

  # bf16 is the upper half of an f32, rounded to nearest even.
  defp bf16(x) do
    <<bits::unsigned-32>> = <<x::float-32>>
    rounded = bits + 0x7FFF + Bitwise.band(Bitwise.bsr(bits, 16), 1)
    <<Bitwise.bsr(rounded, 16)::unsigned-16-native>>
  end

  @specials %{
    f32: %{nan: <<0x7FC00000::32-native>>, infinity: <<0x7F800000::32-native>>, neg_infinity: <<0xFF800000::32-native>>},
    f64: %{
      nan: <<0x7FF8000000000000::64-native>>,
      infinity: <<0x7FF0000000000000::64-native>>,
      neg_infinity: <<0xFFF0000000000000::64-native>>
    },
    f16: %{nan: <<0x7E00::16-native>>, infinity: <<0x7C00::16-native>>, neg_infinity: <<0xFC00::16-native>>},
    bf16: %{nan: <<0x7FC0::16-native>>, infinity: <<0x7F80::16-native>>, neg_infinity: <<0xFF80::16-native>>}
  }

  defp special(x, dtype) do
    case @specials[dtype][x] do
      nil -> raise ArgumentError, "#{inspect(x)} is not a #{dtype} value"
      bits -> bits
    end
  end

  @doc "The flat list of values in `binary` of `dtype` (NaN and infinities as atoms)."
  def decode(binary, dtype) do
    n = size(dtype)
    for <<chunk::binary-size(n) <- binary>>, do: decode_one(chunk, dtype)
  end

  @doc "Bytes per element of `dtype` on the host."
  def size(dtype) when dtype in [:f64, :s64, :u64], do: 8
  def size(dtype) when dtype in [:f32, :s32, :u32], do: 4
  def size(dtype) when dtype in [:f16, :bf16, :s16, :u16], do: 2
  def size(dtype) when dtype in [:s8, :u8, :bool], do: 1

  defp decode_one(<<x::float-32-native>>, :f32), do: x
  defp decode_one(<<x::float-64-native>>, :f64), do: x
  defp decode_one(<<x::float-16-native>>, :f16), do: x
  defp decode_one(<<b::unsigned-16-native>>, :bf16), do: decode_one(<<Bitwise.bsl(b, 16)::unsigned-32-native>>, :f32)
  defp decode_one(<<x::signed-8>>, :s8), do: x
  defp decode_one(<<x::signed-16-native>>, :s16), do: x
  defp decode_one(<<x::signed-32-native>>, :s32), do: x
  defp decode_one(<<x::signed-64-native>>, :s64), do: x
  defp decode_one(<<x::unsigned-8>>, :u8), do: x
  defp decode_one(<<x::unsigned-16-native>>, :u16), do: x
  defp decode_one(<<x::unsigned-32-native>>, :u32), do: x
  defp decode_one(<<x::unsigned-64-native>>, :u64), do: x
  defp decode_one(<<x::unsigned-8>>, :bool), do: x != 0
  # Only non-finite floats are left: Erlang has no float for NaN and the infinities.
  defp decode_one(bits, dtype) do
    {width, exponent, fraction} = %{f16: {16, 5, 10}, f32: {32, 8, 23}, f64: {64, 11, 52}}[dtype]
    <<int::unsigned-size(width)-native>> = bits
    <<sign::1, _exp::size(exponent), frac::size(fraction)>> = <<int::size(width)>>

    cond do
      frac != 0 -> :nan
      sign == 1 -> :neg_infinity
      true -> :infinity
    end
  end
end
