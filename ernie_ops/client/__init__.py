"""The gateway client the apps share (chat, marketing copy, onboarding, docs Q&A) and `bench`.

- `gateway`  streaming chat replies from the gateway: timeouts, errors with a sentence for the user
- `sse`      server-sent events split on "\\n" only (what vLLM streams)
- `retry`    sending a streamed request, retried only when no response byte arrived
"""
