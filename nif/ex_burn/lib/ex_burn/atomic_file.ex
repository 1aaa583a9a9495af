defmodule ExBurn.AtomicFile do
  @moduledoc """
  Files replaced atomically: a crash (a killed VM, a lost machine) at any moment leaves the
  old complete file or the new complete one at the path, never a torn one. `ExBurn.Model.save/2`
  (and so the checkpoint callback) and `ExBurn.Record.save/3` write this way.

  The data goes to a hidden temporary file in the same folder (`.<name>.<pid>.<n>.tmp.<ext>`;
  a rename is atomic only within one file system), which is flushed to disk (`fsync`), renamed
  over the path, and then the folder is flushed so that the rename survives a power loss. The
  write runs in the NIF (`ex_cubecl_record::replace_file`, the Rust side's one way to write
  records) on a dirty IO scheduler: the BEAM's own file functions can't flush a folder.
  """

  @doc """
  Replaces the file at `path` with `data`, creating its folder when missing. On an error the
  file at `path` is left as it was and `{:error, reason}` says why, naming the path.

      iex> path = Path.join(System.tmp_dir!(), "ex_burn_atomic_doc.bin")
      iex> ExBurn.AtomicFile.write(path, ["ab", "c"])
      :ok
      iex> File.read!(path)
      "abc"
      iex> File.rm!(path)
      :ok
  """
  @spec write(Path.t(), iodata()) :: :ok | {:error, String.t()}
  def write(path, data) do
    path = Path.expand(path)

    with :ok <- mkdir(Path.dirname(path)),
         {:ok, true} <- ExCubecl.Native.file_replace(path, IO.iodata_to_binary(data)) do
      :ok
    else
      {:error, %{reason: reason}} -> {:error, reason}
      {:error, reason} when is_binary(reason) -> {:error, reason}
    end
  end

  defp mkdir(dir) do
    case File.mkdir_p(dir) do
      :ok -> :ok
      {:error, reason} -> {:error, "#{dir}: #{:file.format_error(reason)}"}
    end
  end
end
