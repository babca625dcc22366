"""Parsers of what the engines and the gateway measure (vLLM's /metrics): the lowest floor, imported by traffic and the views."""
