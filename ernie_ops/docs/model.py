"""The data the document modules pass to each other, and the one error they raise for bad input."""

from __future__ import annotations

from dataclasses import dataclass, field

from ernie_ops.errors import ErnieOpsError


@dataclass(frozen=True)
class Section:
    """A stretch of a document's text that one passage may come from: a PDF page, or the text under
    one Markdown/DOCX heading path, or a whole text file. Passages never span two sections."""

    text: str
    page: int | None = None  # 1-based PDF page
    heading: tuple[str, ...] = ()  # e.g. ("部署", "升级")


@dataclass(frozen=True)
class Extracted:
    kind: str  # pdf | markdown | text | docx
    sections: list[Section]
    pages: int | None = None  # PDF page count
    encoding: str | None = None  # text and Markdown: the encoding the bytes were decoded with (utf-8, gb18030...)
    empty_pages: tuple[int, ...] = ()  # PDF: the 1-based pages without a text layer (scanned?), skipped


@dataclass(frozen=True)
class Chunk:
    """One passage: its text and where it is in the document (section index, offsets in that section's text)."""

    text: str
    section: int
    start: int
    end: int
    page: int | None = None
    heading: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """'p. 3' or '部署 > 升级' or '' (plain text)."""
        if self.page is not None:
            return f"p. {self.page}"
        return " > ".join(self.heading)


@dataclass(frozen=True)
class Hit:
    """A ranked passage from the index, with what a user needs to open its source."""

    chunk_id: int
    doc_id: int
    collection: str
    file: str  # the document's display name
    text: str
    score: float  # higher is better (BM25 negated, or the fused score)
    page: int | None = None
    heading: tuple[str, ...] = ()
    start: int = 0
    end: int = 0
    ranks: dict[str, int] = field(default_factory=dict)  # per ranking ("lexical", "dense"): 1-based rank
    coverage: float = 0.0  # IDF-weighted share of the question's terms found in the passage (0..1): relevance gate

    @property
    def where(self) -> str:
        if self.page is not None:
            return f"p. {self.page}"
        return " > ".join(self.heading)


class DocumentError(ErnieOpsError):
    """A file that cannot be indexed. `reason` is a short code (tests, logs, --json); str() is one sentence
    for a user or operator naming the file and what to do."""

    def __init__(self, name: str, reason: str, message: str):
        self.name, self.reason = name, reason
        super().__init__(f"{name}: {message}")
