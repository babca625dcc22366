"""Health tiers of one vLLM instance: alive (/health), right model (/v1/models), servable (a completion).

`/health` alone only says the engine process lives (it answered 200 after a GPU fault upstream),
so every gate that lets traffic in asks for all three tiers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from ernie_ops.config import HealthConfig
from ernie_ops.errors import ProbeFailed


def base_url(port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}"


@dataclass(frozen=True)
class GateResult:
    """What a passed gate saw, for logs and `--json`."""

    models: list[str]
    completion_text: str
    finish_reason: str | None
    seconds: float


def health_problem(client: httpx.Client, base: str, timeout: float) -> str | None:
    """None when /health answers 200 within `timeout`; else what went wrong, as a journal line reads it."""
    try:
        status = client.get(f"{base}/health", timeout=timeout).status_code
    except httpx.TimeoutException:
        return f"/health timed out ({timeout:g} s)"
    except httpx.ConnectError:
        return "connection refused"
    except httpx.HTTPError as exc:
        return f"/health failed ({type(exc).__name__})"
    return None if status == 200 else f"/health answered {status}"


def alive(client: httpx.Client, base: str, timeout: float) -> bool:
    """True when /health answers 200 within `timeout`; connection refused is the normal 'still loading'."""
    return health_problem(client, base, timeout) is None


def served_models(client: httpx.Client, base: str, timeout: float) -> list[str]:
    try:
        r = client.get(f"{base}/v1/models", timeout=timeout)
        r.raise_for_status()
        return [m["id"] for m in r.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ProbeFailed(f"/v1/models did not answer with a model list: {_describe(exc)}") from None


def smoke_completion(client: httpx.Client, base: str, model: str, prompt: str, max_tokens: int, timeout: float) -> tuple[str, str | None]:
    """One real generation; proves the weights, the scheduler and the sampler all work."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    try:
        r = client.post(f"{base}/v1/completions", json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ProbeFailed(f"completion request failed: {_describe(exc)}") from None
    if r.status_code != 200:
        raise ProbeFailed(f"completion returned HTTP {r.status_code}: {r.text[:200]}")
    try:
        choice = r.json()["choices"][0]
        return choice.get("text", ""), choice.get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProbeFailed(f"completion answer is not an OpenAI completion: {r.text[:200]}") from None


def check_servable(client: httpx.Client, base: str, model: str, health: HealthConfig) -> GateResult:
    """Model tier then completion tier (call once `alive` is true); raises ProbeFailed naming the tier."""
    t0 = time.monotonic()
    models = served_models(client, base, health.request_timeout_seconds)
    if model not in models:
        raise ProbeFailed(f"wrong model: {base} serves {models}, the config expects '{model}'")
    text, reason = smoke_completion(client, base, model, health.smoke_prompt, health.smoke_max_tokens, health.smoke_timeout_seconds)
    return GateResult(models=models, completion_text=text, finish_reason=reason, seconds=time.monotonic() - t0)


def gate(base: str, model: str, health: HealthConfig, client: httpx.Client | None = None) -> GateResult:
    """All three tiers once, now: for the cutover and `status`, where the instance should already serve."""
    own = client is None
    client = client or httpx.Client()
    try:
        if not alive(client, base, health.request_timeout_seconds):
            raise ProbeFailed(f"{base}/health does not answer 200")
        return check_servable(client, base, model, health)
    finally:
        if own:
            client.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
