"""Deployment kit for ERNIE-4.5-0.3B-PT served by vLLM behind systemd and nginx."""

__version__ = "0.1.0"
