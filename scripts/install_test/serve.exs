# The install test's release server: serves the folder DIR over HTTP on 127.0.0.1, on a port
# the system picks, written to PORT_FILE; runs until killed.
#
#     elixir serve.exs DIR PORT_FILE
[dir, port_file] = System.argv()
{:ok, _} = Application.ensure_all_started(:inets)
dir = dir |> Path.expand() |> String.to_charlist()

{:ok, pid} =
  :inets.start(:httpd,
    port: 0,
    bind_address: {127, 0, 0, 1},
    server_name: ~c"ex_cubecl-install-test",
    server_root: dir,
    document_root: dir,
    modules: [:mod_get],
    mime_types: [{~c"gz", ~c"application/gzip"}]
  )

File.write!(port_file, Integer.to_string(:httpd.info(pid)[:port]))
Process.sleep(:infinity)
