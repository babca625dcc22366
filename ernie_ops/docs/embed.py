"""Vectors for passages and questions from an embedding model served by vLLM's OpenAI `/v1/embeddings`
(the optional dense retrieval path, `chat.docs.embeddings`).

- Texts are sent in batches of at most `batch_size`; the vectors come back in the order of the texts
  (the response's `index` fields put them there, whatever order the server lists them in).
- Every answer is checked: one vector per text, numbers only (finite), one dimension for all of them,
  and the same dimension as the client saw before (or as `dimension=` expects: the index's), so a model
  swapped behind the URL is caught before its vectors are mixed with the old ones.
- Every failure (connection refused, time-out, HTTP 4xx/5xx with vLLM's own error message, an answer that
  is not an embeddings response, a wrong dimension) is an `EmbeddingError`: one sentence naming the URL and
  the model and what to do; `reason` is a short code for logs and tests.
"""

from __future__ import annotations

import functools
import json
import math
import ssl
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import httpx

from ernie_ops.errors import ErnieOpsError

if TYPE_CHECKING:
    from ernie_ops.docs.config import EmbeddingsConfig

DEFAULT_BATCH_SIZE = 32
SETTING = "chat.docs.embeddings"  # where an operator fixes the URL, model, timeout


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx builds an SSL context (0.2 s of CPU here) for every client it is not given one: build it once."""
    return httpx.create_ssl_context()


class EmbeddingError(ErnieOpsError):
    """The embedding server gave no usable vectors. `reason`: connect | timeout | http | response | dimension | input."""

    def __init__(self, reason: str, message: str, status: int | None = None):
        self.reason, self.status = reason, status
        super().__init__(message)


def endpoint(base_url: str) -> str:
    """The embeddings URL for a server's base URL, given with or without its `/v1`."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


def batches(texts: Sequence[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(texts), size):
        yield list(texts[i : i + size])


def server_message(body: str) -> str:
    """The error text of an error answer: vLLM's `{"error": {"message": ...}}`, FastAPI's `detail`, or the body."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        for key in ("message", "detail"):
            if isinstance(data.get(key), str):
                return data[key]
        if isinstance(err, str):
            return err
    text = " ".join(body.split())
    return text[:300] or "(empty body)"


class EmbeddingClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        timeout: float,
        api_key: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dimension: int | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.base_url, self.model, self.timeout = base_url, model, timeout
        self.url = endpoint(base_url)
        self.batch_size = batch_size
        self.dimension = dimension  # expected (the index's), else learnt from the first answer
        self._dimension_from = "the index's vectors"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _http_options(self) -> dict:
        return {"timeout": self.timeout, "headers": self._headers, "verify": _ssl_context()}

    @classmethod
    def from_config(cls, cfg: EmbeddingsConfig, *, api_key: str | None = None, dimension: int | None = None) -> EmbeddingClient:
        """The client `chat.docs.embeddings` describes (its batch size too); `dimension`: the index's, if it holds vectors."""
        if not cfg.url or not cfg.model:
            raise EmbeddingError("input", f"{SETTING} needs `url` and `model` (the vLLM embedding server and its served name)")
        return cls(cfg.url, cfg.model, cfg.timeout_seconds, api_key, batch_size=cfg.batch_size, dimension=dimension)

    @property
    def _where(self) -> str:
        return f"the embedding server {self.url} (model '{self.model}')"

    # -- requests ------------------------------------------------------------------------------
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; [] for no texts."""
        self._check_input(texts)
        out: list[list[float]] = []
        if not texts:
            return out
        async with httpx.AsyncClient(**self._http_options()) as client:
            for batch in batches(texts, self.batch_size):
                try:
                    response = await client.post(self.url, json=self._body(batch))
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                out += self._vectors(response, len(batch))
        return out

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed` for callers without an event loop (the CLI)."""
        self._check_input(texts)
        out: list[list[float]] = []
        if not texts:
            return out
        with httpx.Client(**self._http_options()) as client:
            for batch in batches(texts, self.batch_size):
                try:
                    response = client.post(self.url, json=self._body(batch))
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                out += self._vectors(response, len(batch))
        return out

    def _body(self, batch: list[str]) -> dict:
        return {"model": self.model, "input": batch, "encoding_format": "float"}

    @staticmethod
    def _check_input(texts: Sequence[str]) -> None:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("embed() takes a list of strings")

    # -- answers -------------------------------------------------------------------------------
    def _transport_error(self, exc: httpx.HTTPError) -> EmbeddingError:
        if isinstance(exc, httpx.TimeoutException):
            return EmbeddingError(
                "timeout",
                f"{self._where} did not answer within {self.timeout:g} s; check that it runs and is not overloaded, "
                f"or raise {SETTING}.timeout_seconds",
            )
        if isinstance(exc, httpx.ConnectError):
            why = str(exc) or type(exc).__name__
            return EmbeddingError("connect", f"cannot connect to {self._where} ({why}); start it or fix {SETTING}.url")
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return EmbeddingError("connect", f"the connection to {self._where} failed ({detail}); check the server's log and try again")

    def _status_error(self, response: httpx.Response) -> EmbeddingError:
        code = response.status_code
        message = server_message(response.text)
        if code == 404 and "does not exist" in message:
            remedy = f"set {SETTING}.model to a name its /v1/models lists"
        elif code == 404:
            remedy = f"check that {SETTING}.url points at a vLLM server started with --runner pooling"
        elif code in (401, 403):
            remedy = "check the API key the server expects"
        elif code == 400 and "context length" in message:
            remedy = "lower chat.docs.chunk_chars or start the embedding server with a larger --max-model-len"
        elif code < 500:
            remedy = "check that the model is an embedding model served with --runner pooling"
        else:
            remedy = "check the embedding server's log"
        return EmbeddingError("http", f"{self._where} answered HTTP {code}: {message}; {remedy}", status=code)

    def _bad_answer(self, what: str) -> EmbeddingError:
        return EmbeddingError(
            "response",
            f"{self._where} answered with {what}, not an OpenAI embeddings response; check that {SETTING}.url is a vLLM embedding server",
        )

    def _vectors(self, response: httpx.Response, expected: int) -> list[list[float]]:
        if response.status_code >= 400:
            raise self._status_error(response)
        try:
            data = response.json()
        except ValueError:
            raise self._bad_answer(f"a body that is not JSON ({' '.join(response.text.split())[:80]!r})") from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise self._bad_answer("JSON without a `data` list")
        if len(items) != expected:
            raise self._bad_answer(f"{len(items)} vectors for {expected} texts")
        indexed = sorted(items, key=lambda i: i.get("index") if isinstance(i.get("index"), int) else -1)
        if [i.get("index") for i in indexed] != list(range(expected)):
            raise self._bad_answer(f"indices {[i.get('index') for i in items]} (one per text, 0..{expected - 1})")
        vectors = [self._vector(item.get("embedding"), n) for n, item in enumerate(indexed)]
        dims = sorted({len(v) for v in vectors})
        if len(dims) > 1:
            raise self._bad_answer(f"vectors of different lengths ({', '.join(map(str, dims))})")
        if self.dimension is None:
            self.dimension, self._dimension_from = dims[0], "its earlier answers"
        elif dims[0] != self.dimension:
            raise EmbeddingError(
                "dimension",
                f"{self._where} returns {dims[0]}-dimensional vectors where {self.dimension} were expected "
                f"(from {self._dimension_from}); vectors of two models cannot be searched together: set {SETTING}.model "
                "back, or index the documents again with the new model",
            )
        return vectors

    def _vector(self, value: object, n: int) -> list[float]:
        ok = (
            isinstance(value, list)
            and value
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value)
        )
        if not ok:
            raise self._bad_answer(f"embedding {n} that is not a non-empty list of finite numbers")
        return [float(x) for x in value]
