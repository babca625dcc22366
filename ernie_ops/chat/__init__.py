"""The chat's core, without Chainlit: what the Chainlit wiring (`ernie_ops/chat_app/`) drives, and what the unit
tests and the CLI import (Chainlit lives in its own venv: its mcp pin clashes with vLLM's).

  scenarios.py     the built-in business scenarios, as data (the config can replace them)
  config.py        the `chat` config section (ChatConfig, scenarios), composing docs/, marketing/, onboarding/ and
                   threads/'s sections
  machine.py       a small declarative state machine (idle / collecting_info / generating)
  flow.py          one session's scenario flow on that machine: ask for missing fields, then generate
  cleanup.py       output clean-up that leaves Markdown and code untouched
  history.py       history cut to the real token budget (vLLM's /tokenize, estimate only as fallback)
  conversation.py  one session end to end (flow -> budget -> stream from `ernie_ops.client` -> clean-up), behind a `Sink`
  cards.py         the props of the marketing form and cards (the elements' data)
  docs_session.py  one session's documents: what it may search, its own uploads, retrieval
  onboarding_answer.py  a typed onboarding question through the Conversation, with the employee's facts and plan
  drain.py         the replies in flight, so that a stop lets them finish (and the history writes they make)
  thread_dicts.py  Chainlit's thread, step and element dicts as the history store keeps them
  upload_gate.py   whether the app takes one more upload (scenario, per-user quota); upload_limits.py the size
                   limits of every layer, from one setting; upload_restore.py a resumed thread's uploads indexed again
  users.py         the users file: scrypt-hashed passwords, `ernie-ops chat-user add`; login_guard.py the lockout
"""
