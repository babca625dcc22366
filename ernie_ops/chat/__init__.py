"""The Chainlit chat app behind nginx (`ernie-ops chat`, ernie-chainlit.service).

Only `app.py` and `server.py` import Chainlit; everything else is plain Python that the unit tests
and the launcher import without it (Chainlit lives in its own venv: its mcp pin clashes with vLLM's):

  scenarios.py  the built-in business scenarios, as data (the config can replace them)
  config.py     the `chat` config section (ChatConfig, scenarios), composing docs/, copy/ and onboarding/'s sections
  machine.py    a small declarative state machine (idle / collecting_info / generating)
  flow.py       one session's scenario flow on that machine: ask for missing fields, then generate
  cleanup.py    output clean-up that leaves Markdown and code untouched
  history.py    history cut to the real token budget (vLLM's /tokenize, estimate only as fallback)
  conversation.py  one session end to end (flow -> budget -> stream from `ernie_ops.client` -> clean-up), behind a `Sink`
  users.py      the users file: scrypt-hashed passwords, `ernie-ops chat-user add`
  server.py     `ernie-ops chat`: checks, Chainlit's config file, READY for systemd, then Chainlit
  app.py        the Chainlit hooks that tie the pieces together
"""
