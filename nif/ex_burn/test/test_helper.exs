# Every test process computes on ExBurn.Backend unless it says otherwise.
Nx.global_default_backend(ExBurn.Backend)
# Nx's suite (nx_defn_suite_test.exs) tags tests that need a cluster of nodes, and its
# except-list tags the tests it leaves out by cause.
ExUnit.start(exclude: [:distributed, :nx_except], assert_receive_timeout: 1000)
