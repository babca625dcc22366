"""`ernie-ops eval`: a golden set of questions run against an instance or the gateway, with a pass rate.

- `golden`: the set's YAML schema and loading (every problem at once, with file:line and field).
- `score`: pure checks of one answer (phrases that must and must not appear, the citations of a docs answer).
- `run`: the cases through the real pipelines (a chat request; document Q&A through the chat app's
  `Conversation`: retrieval, prompt, clean-up, 【n】 markers; a marketing request through `CopyWriter` and its
  rules), `run_set` with the client injected, and
  `evaluate(path, target)`, the function a gate calls.
"""
