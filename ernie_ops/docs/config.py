"""The `chat.docs` section of the config file: document Q&A (index, chunking, retrieval, upload limits,
read access per collection, the optional embedding server)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from ernie_ops.config_section import Section
from ernie_ops.docs.tokens import TOKENIZERS


class EmbeddingsConfig(Section):
    """The optional dense retrieval path: an embedding model served by vLLM's OpenAI `/v1/embeddings`
    (e.g. a bge-small-zh-class BERT on its own `vllm serve --runner pooling` instance). Off by default."""

    enabled: bool = False
    url: str | None = Field(None, pattern=r"^https?://", description="base URL of the embedding server, e.g. http://127.0.0.1:8100")
    model: str | None = Field(None, min_length=1, description="its served model name")
    timeout_seconds: float = Field(30.0, gt=0.0, le=600.0)
    batch_size: int = Field(32, ge=1, le=1024)
    weight: float = Field(1.0, gt=0.0, le=10.0, description="the dense ranking's weight in reciprocal-rank fusion (lexical: 1)")

    @model_validator(mode="after")
    def _complete_when_on(self) -> EmbeddingsConfig:
        if self.enabled and (not self.url or not self.model):
            raise ValueError("enabled embeddings need `url` and `model` (the vLLM embedding server and its served name)")
        return self


class DocsCollectionConfig(Section):
    """Who may search a shared collection from the chat app (the CLI, run by the operator, sees all)."""

    readers: list[str] = Field(default_factory=lambda: ["*"], description="user names, or '*' for every chat user")


class DocsConfig(Section):
    """Document Q&A (`ernie-ops docs`, the chat app's retrieval scenarios). Defaults measured by
    benchmarks/docs_quality.py (see README: quality table)."""

    index_file: str = Field("/var/lib/ernie-ops-chat/docs/index.sqlite", min_length=1, description="SQLite index (chat app's state dir)")
    tokenizer: str = Field("unigram+bigram", description="index tokens: bigram | jieba | jieba+bigram | unigram+bigram | whitespace")
    chunk_chars: int = Field(400, ge=50, le=8000, description="passage size in characters")
    overlap_chars: int = Field(80, ge=0, le=4000, description="characters repeated between neighbouring passages")
    top_k: int = Field(4, ge=1, le=20, description="passages given to the model")
    min_coverage: float = Field(
        0.35, ge=0.0, le=1.0, description="below this share of the question's terms in the best passage: 'the documents do not answer this'"
    )
    max_file_mb: float = Field(20.0, gt=0.0, le=1024.0)
    max_pages: int = Field(2000, ge=1, le=100000)
    max_files_per_message: int = Field(10, ge=1, le=200)
    extract_timeout_seconds: float = Field(120.0, gt=0.0, le=3600.0)
    extract_memory_mb: int = Field(1024, ge=128, le=65536)
    sweep_max_share: float = Field(
        0.5, gt=0.0, le=1.0,
        description="the daily sweep of uploads whose thread is gone removes at most this share of the host's uploads in one "
        "pass (5 always may go); more is refused: a database restored from an old backup is not a deletion",
    )  # fmt: skip
    collections: dict[str, DocsCollectionConfig] = Field(
        default_factory=dict, description="read access per shared collection; a collection not listed is readable by every user"
    )
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str) -> str:
        if value not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer; choose one of {', '.join(TOKENIZERS)}")
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> DocsConfig:
        if self.overlap_chars >= self.chunk_chars:
            raise ValueError(f"overlap_chars ({self.overlap_chars}) must be smaller than chunk_chars ({self.chunk_chars})")
        return self
