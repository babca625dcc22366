"""Conversations kept per user: threads, their steps (messages), elements (uploads, sources, with their
bytes), and feedback, in SQLite (one chat host) or PostgreSQL (several chat hosts sharing one database).

Chainlit-free: the Chainlit data layer (ernie_ops/chat_app/data_layer.py) maps its dicts onto `ThreadStore`;
the CLI (`ernie-ops chat feedback`, `ernie-ops chat-user remove`) and retention use the store directly.

- schema.py: the tables (SQLAlchemy Core) and the ordered migrations that build them;
- database.py: config/environment -> database URL, engine, the SQLite file checks, migrating at open;
- store.py: `ThreadStore`, every read and write, errors turned into `HistoryUnavailable`;
- breaker.py: `Breaker`, after a database failure the store's calls fail at once for a while (one trial call then);
- feedback.py: feedback rows -> the operator's report (pure);
- retention.py: `apply_retention`, deleting threads idle for `chat.history.retention_days`.
"""
