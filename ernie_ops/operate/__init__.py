"""The orchestrator above traffic/: `ernie-ops apply` and `route` (config -> units, engine, pool, gateway)."""
