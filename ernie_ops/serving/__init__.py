"""One vLLM instance on one port: the command line it runs with (`engine`), the launcher systemd starts
(`launcher`: READY only once the model serves), the engine's log read for its cause of death (`enginelog`),
the health tiers (`probe`), its process group and shared memory (`procs`), the model's manifest
(`manifest`), and the sitecustomize every engine process imports (`engine_site/`)."""
