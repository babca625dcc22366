"""HR connectors for the onboarding helper: who a new employee is.

One job per module:
- `config`: the `chat.onboarding.hr` config section (file or SCIM, URL, timeouts, the token's variable name).
- `model`: the `Employee` record every connector returns, `HRError` (a `kind` the chat app branches on,
  a friendly bilingual sentence for the chat, a detail for the log) and the checks shared by the
  connectors (a department is required; the start date is parsed, past or future: the onboarding
  window, not the record, decides who is served).
- `export_file`: the embedded default for sites without an HR API: an HR export file (CSV or YAML),
  looked up by user_name or employee_number.
- `scim`: a SCIM 2.0 client (RFC 7643/7644) over httpx: `GET /Users?filter=...`, department and manager
  from the enterprise extension, the start date from a configurable attribute path.
(`ernie-ops hr check FILE`, which also needs the onboarding window, lives above: `onboarding/export_check.py`.)

Both connectors expose `find(user_name=..., employee_number=...) -> Employee` and raise only `HRError`:
the chat app (`chat_app/onboarding_ui.py`, through `onboarding.service`) branches on its `kind`, so a
connector must never let another exception out. `onboarding.service.connector_for` picks the connector
from the `hr` config section (the token comes from the environment, never the config file).
"""
