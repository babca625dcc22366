"""Deployment kit for ERNIE-4.5-0.3B-PT served by vLLM behind systemd and nginx.

Module map (one concern per package; each package's docstring says what lives there; `.importlinter` holds the
floors, top to bottom, and `lint-imports` in the unit tier fails an import that points up):
- `operate/`   `apply` and `route`: provisioning's one converge step (units, engine, pool, gateway)
- `observe/`   `status`, `top`, logs, monitoring files, `bench`
- `traffic/`   nginx routing, the edge, the cutover runbook, the pool, Prometheus marks, and `canary/` (steps, bake,
  SLO gate)
- `host/`      systemd units, ports, GPUs, the cgroup's memory limit, the cutover lock and history
- `serving/`   one vLLM instance: its command, the launcher systemd runs, probes, engine log, processes
- `stats/`     vLLM's metrics parsed (the lowest floor: traffic and the views read it)
- `files/`     YAML and SQLite files kept safe, damaged files kept aside, one atomic write
- `client/`    the gateway client the apps and `bench` share (streaming, SSE, the one retry rule)
- `chat/`      the Chainlit app and its conversation logic; `docs/` document Q&A; `marketing/` marketing
  copy; `onboarding/` the onboarding helper; `hr/` HR records (SCIM, exports); `threads/` the chat history
  (conversations, uploads, feedback per user; SQLite or PostgreSQL)
- `evaluate/`  `eval`: a golden set (YAML) run through the chat and document Q&A pipelines, a weighted pass rate
- `config.py` the one YAML config: loading, error reporting, the engine/gateway/cutover sections, and `chat`
  composed from the feature packages' own sections (`chat/config.py`, `docs/config.py`, `marketing/config.py`,
  `onboarding/config.py`, `hr/config.py`, `threads/config.py`; their shared base in `config_section.py`);
  `errors.py` the error hierarchy and exit codes;
  `cli/` the `ernie-ops` command (a module per command group); `text_numbers.py` numbers and months read from Chinese/English text
"""

__version__ = "0.1.0"
