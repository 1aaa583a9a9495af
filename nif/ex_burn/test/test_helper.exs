# Every test process computes on ExBurn.Backend unless it says otherwise.
Nx.global_default_backend(ExBurn.Backend)
ExUnit.start()
