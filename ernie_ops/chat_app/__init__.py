"""The Chainlit chat app behind nginx (`ernie-ops chat`, ernie-chainlit.service): the wiring of the chat's core
(`ernie_ops/chat/`) into Chainlit. The modules here import Chainlit (or run inside its server); they live in the
chat venv only.

  server.py       `ernie-ops chat`: checks, Chainlit's config file, READY for systemd, then Chainlit
  app.py          the Chainlit hooks that tie the pieces together, and the app's own checked routes
  services.py     what the hooks share (scenarios, gateway client, tools, app-wide limits), built from the config
  data_layer.py   Chainlit's data layer over the history store (ownership, a busy database, held uploads)
  marketing_ui.py the Marketing form, cards and batch files; onboarding_ui.py the onboarding cards
  revocation.py   every request and websocket checked against the users file as it is now
  session_moves.py a session moved to a new websocket before it began still starts (or resumes) there
  elements/       the custom elements' JSX, served by Chainlit from public/elements
"""
