Nx.default_backend(ExBurn.Backend)
ExUnit.start()
