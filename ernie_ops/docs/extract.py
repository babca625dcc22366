"""Bytes of an uploaded or operator-loaded file -> its text as sections (`Extracted`), or a `DocumentError` with a
reason code and one sentence naming the file. PDF (pypdf), DOCX (python-docx, bombs refused), Markdown
(markdown-it-py) and plain text (UTF-8/16, GB18030 when plausible), decided by content; every text normalised the
same way; every library exception a "corrupt" sentence. Why these libraries and rules, with measurements:
docs/design/document-extraction.md.
"""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from dataclasses import dataclass

from ernie_ops.docs.model import DocumentError, Extracted, Section

MB = 1024 * 1024
EXTENSIONS = {".pdf": "pdf", ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".docx": "docx"}
SUFFIXES = tuple(EXTENSIONS)
ACCEPTED = " ".join(EXTENSIONS)  # ".pdf .md .markdown .txt .docx"
LABEL = {"pdf": "PDF", "markdown": "Markdown file", "text": "text file", "docx": "DOCX document"}


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 50 * MB  # the file as uploaded
    max_pages: int = 2000  # PDF pages
    max_unzipped_bytes: int = 200 * MB  # DOCX: sum of the ZIP members' declared sizes (zipfile enforces them)
    max_zip_ratio: float = 100.0  # DOCX: unzipped/zipped size of any member over 1 MB (XML is ~5-20)
    max_zip_members: int = 5000
    min_text_chars: int = 5  # letters, digits or ideographs left after normalisation


# ---------------------------------------------------------------------------------------------- names


_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def _shown(raw: str | bytes) -> str:
    """The name with anything unprintable escaped (\\xNN, \\uNNNN), so a message can show it safely."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")
    out = []
    for ch in raw:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def check_name(raw: str | bytes) -> str:
    """The display name for a file, or DocumentError reason "name".

    Refused, never rewritten: documents are replaced by name, so silently reducing "a/b.pdf" to "b.pdf" could
    replace another document. Refused are: names that are not UTF-8 (bytes, or str carrying surrogateescape'd
    bytes from os.fsdecode), path separators (/ and \\), NUL and other control characters, bidirectional
    override characters (they make "evil\u202efdp.exe" display as "evilexe.pdf"), ".", "..", empty or blank
    names, and names over 255 bytes. A ".." inside a name ("v1..2.pdf") is harmless once separators are
    refused, and is accepted. The only change made is Unicode NFC (macOS supplies decomposed names), so the
    same name typed on two systems is one document. The message shows the name with the bad parts escaped.
    """
    if isinstance(raw, bytes):
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentError(_shown(raw), "name", "the file name is not valid UTF-8; rename the file and try again") from None
    else:
        name = raw
    shown = _shown(name)
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        raise DocumentError(shown, "name", "the file name is not valid UTF-8; rename the file and try again")
    if "/" in name or "\\" in name:
        raise DocumentError(shown, "name", "the file name contains a path separator; give the plain file name (e.g. report.pdf)")
    if any(unicodedata.category(ch) == "Cc" or ch in _BIDI for ch in name):
        raise DocumentError(shown, "name", "the file name contains control characters; rename the file and try again")
    if not name.strip() or name.strip() in (".", ".."):
        raise DocumentError(shown or "''", "name", "this is not a file name; give the plain file name (e.g. report.pdf)")
    name = unicodedata.normalize("NFC", name)
    if len(name.encode()) > 255:
        raise DocumentError(shown[:60] + "...", "name", "the file name is longer than 255 bytes; rename the file and try again")
    return name


# ------------------------------------------------------------------------------------------ normalisation

# full-width punctuation and symbols (not letters/digits) that NFKC would turn into ASCII, and the ellipsis
_KEEP = re.compile(r"([\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff60\u2026\u22ef]+)")
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
_NEWLINES = dict.fromkeys(map(ord, "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), "\n")
_LINE_BREAKS_AND_ZERO_WIDTH = _NEWLINES | _ZERO_WIDTH
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff]")  # and lone surrogates (broken ToUnicode maps)
_SPACES = re.compile(r"[^\S\n]{2,}|[^\S \n]")  # a run of whitespace, or one that is not a plain space
# Han, CJK punctuation, kana, full-width forms (not Hangul: Korean separates words with spaces)
_CJK = "\u2e80-\u2fdf\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f"
_CJK_GAP = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")
_BLANK_LINES = re.compile(r"\n{2,}")


def normalize(text: str) -> str:
    """NFKC except full-width punctuation, no zero-width/control characters, one space per whitespace run,
    no space between CJK characters, stripped lines, no blank lines (see the module docstring)."""
    text = text.replace("\r\n", "\n").translate(_LINE_BREAKS_AND_ZERO_WIDTH)
    parts = _KEEP.split(text)
    text = "".join(p if i % 2 else unicodedata.normalize("NFKC", p) for i, p in enumerate(parts))
    text = _CONTROLS.sub("", text)
    text = _SPACES.sub(" ", text)
    text = _CJK_GAP.sub("", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n", text).strip()


_WORD_CHAR = re.compile(r"[^\W_]")


def _has_text(sections: list[Section], enough: int) -> bool:
    """At least `enough` letters, digits or ideographs (stops counting there)."""
    found = 0
    for section in sections:
        for _ in _WORD_CHAR.finditer(section.text):
            found += 1
            if found >= enough:
                return True
    return found >= enough


# ---------------------------------------------------------------------------------------------- sniffing


_IMAGES = [
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"BM", "a BMP image"),
]


def _zip_kind(data: bytes) -> str:
    """docx | xlsx | pptx | zip | broken-zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = set(z.namelist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        return "broken-zip"
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names:
        return "xlsx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    return "zip"


_LOOKS = {
    "pdf": "a PDF",
    "docx": "a DOCX document",
    "xlsx": "an Excel workbook (XLSX)",
    "pptx": "a PowerPoint file (PPTX)",
    "zip": "a ZIP archive",
    "broken-zip": "a damaged ZIP/DOCX file",
    "text": "a plain text file",
    "binary": "binary data, not UTF-8 or GB18030 text",
}


def _sniff(data: bytes) -> str:
    """What the content is: pdf | docx | xlsx | pptx | zip | broken-zip | text | binary | an image's label."""
    if b"%PDF-" in data[:1024]:
        return "pdf"
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        return _zip_kind(data)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "a WebP image"
    for magic, label in _IMAGES:
        if data.startswith(magic):
            return label
    return "text" if decode_text(data) is not None else "binary"


_IMPLAUSIBLE = re.compile(
    r"[^\t\n\r\x20-\x7e\u00a0-\u00ff\u0370-\u04ff\u2010-\u206f\u2100-\u27bf\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]"
)


def decode_text(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) for UTF-8 (BOM or not), UTF-16 with BOM, or plausible GB18030; None for binary."""
    if data.startswith(b"\xef\xbb\xbf"):
        try:
            return data[3:].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError:
            return None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            return None
    if b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return (text, "utf-8") if _printable_share(text) >= 0.95 else None
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return None
    return (text, "gb18030") if len(_IMPLAUSIBLE.findall(text)) <= 0.05 * len(text) else None


_BAD_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def _printable_share(text: str) -> float:
    return 1 - len(_BAD_CONTROLS.findall(text)) / len(text) if text else 1.0


# ------------------------------------------------------------------------------------------------ extract


def extract(data: bytes, name: str, limits: Limits = Limits()) -> Extracted:
    """The text of one file as sections; DocumentError (reason, one sentence) for anything that cannot be
    indexed: empty, too_large, unsupported, wrong_type, encrypted, no_text, corrupt, bomb.

    `name` is the display name, already checked by the caller with check_name (a sync keeps relative paths
    such as "ops/guide.md", each part checked); here it only names the file in messages and gives the
    extension the content must agree with."""
    try:
        return extract_raw(data, name, limits)
    except Exception as exc:
        raise as_document_error(exc, name) from exc


def check_size(name: str, size: int, limits: Limits) -> None:
    """The size limit, also checked by the callers before they read a file or start the extraction child."""
    if size > limits.max_bytes:
        raise DocumentError(name, "too_large", f"is {_mb(size)}, over the {_mb(limits.max_bytes)} limit; split it or upload a smaller file")


def extract_raw(data: bytes, name: str, limits: Limits) -> Extracted:
    """extract() with library exceptions left raw (isolate's child maps MemoryError to "crashed" itself)."""
    if not data:
        raise DocumentError(name, "empty", "is empty (0 bytes); upload the file with its content")
    check_size(name, len(data), limits)
    ext = _extension(name)
    if ext not in EXTENSIONS:
        what = _sniff(data)
        raise DocumentError(
            name,
            "unsupported",
            f"cannot be indexed: {_LOOKS.get(what, what)} named {ext or 'without an extension'}; accepted types: {ACCEPTED}",
        )
    expected = EXTENSIONS[ext]
    actual = _sniff(data)
    if (expected in ("markdown", "text") and actual == "text") or actual == expected:
        pass
    elif expected == "docx" and actual == "broken-zip":
        raise DocumentError(name, "corrupt", "is damaged or truncated (its ZIP directory cannot be read); upload an intact copy")
    else:
        looks = _LOOKS.get(actual, actual)
        raise DocumentError(
            name, "wrong_type", f"is not a {LABEL[expected]} (it looks like {looks}); rename it or upload the real {LABEL[expected]}"
        )
    result = {"pdf": _pdf, "docx": _docx, "markdown": _markdown, "text": _text}[expected](data, name, limits)
    if not _has_text(result.sections, limits.min_text_chars):
        if expected == "pdf":
            raise DocumentError(name, "no_text", "no text found; OCR is not supported (upload a PDF with a text layer)")
        raise DocumentError(name, "no_text", "has (almost) no text, only whitespace; nothing to index")
    return result


def _extension(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _mb(n: int) -> str:
    """2 MB, 2.5 MB, 1.0 KB: a size for a message."""
    if n < MB:
        return f"{n / 1024:.1f} KB"
    return f"{n / MB:.1f} MB" if n % MB else f"{n // MB} MB"


def as_document_error(exc: BaseException, name: str) -> DocumentError:
    """Any exception from reading a file as a DocumentError "corrupt" with one sentence naming its type."""
    if isinstance(exc, DocumentError):
        return exc
    kind = type(exc).__name__
    detail = " ".join(str(exc).split())[:120]
    what = f"{kind}: {detail}" if detail else kind
    if isinstance(exc, MemoryError):
        return DocumentError(name, "corrupt", "ran out of memory while being read (damaged or far too complex); the file was not indexed")
    if isinstance(exc, RecursionError):
        return DocumentError(name, "corrupt", "is nested too deeply to read (damaged or built to crash readers); the file was not indexed")
    if _is_format_error(exc):
        return DocumentError(name, "corrupt", f"is damaged or truncated and cannot be read ({what}); upload an intact copy")
    return DocumentError(name, "corrupt", f"could not be read (unexpected {what}); the file was not indexed")


def _is_format_error(exc: BaseException) -> bool:
    import struct
    import zlib

    from lxml import etree
    from pypdf.errors import PyPdfError

    return isinstance(exc, PyPdfError | zipfile.BadZipFile | zlib.error | etree.LxmlError | struct.error | KeyError | ValueError | EOFError)


# -------------------------------------------------------------------------------------------------- PDF


def _pdf(data: bytes, name: str, limits: Limits) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    if b"%%EOF" not in data[-2048:]:
        raise DocumentError(name, "corrupt", "is truncated or damaged (no PDF end-of-file marker); upload the complete file")
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")
        except (DependencyError, FileNotDecryptedError, NotImplementedError):
            opened = 0
        if not opened:
            raise DocumentError(name, "encrypted", "is password-protected; remove the password and upload it again")
    count = len(reader.pages)
    if count > limits.max_pages:
        raise DocumentError(name, "too_large", f"has {count} pages, over the {limits.max_pages}-page limit; split it and upload the parts")
    sections, empty = [], []
    for number, page in enumerate(reader.pages, start=1):
        text = normalize(_page_text(page))
        if _WORD_CHAR.search(text):
            sections.append(Section(text, page=number))
        else:
            empty.append(number)
    return Extracted("pdf", sections, pages=count, empty_pages=tuple(empty))


def _page_text(page) -> str:
    text = page.extract_text() or ""
    if _scattered(text):
        try:
            return page.extract_text(extraction_mode="layout") or text
        except Exception:  # layout mode is the less travelled path; the plain text is still usable
            return text
    return text


def _scattered(text: str) -> bool:
    """pypdf's plain text of a page drawn glyph by glyph: most non-blank lines are one character."""
    lines = [line for line in (raw.strip() for raw in text.split("\n")) if line]
    return len(lines) >= 6 and sum(len(line) == 1 for line in lines) >= 0.5 * len(lines)


# ------------------------------------------------------------------------------------------------- DOCX

_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*([1-9])$", re.IGNORECASE)


def _check_zip(data: bytes, name: str, limits: Limits) -> None:
    """Refuse a zip bomb from the ZIP directory alone, before anything is decompressed. The declared sizes are
    trustworthy upper bounds: zipfile stops a member at its declared size (and fails its CRC)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
    if len(infos) > limits.max_zip_members:
        raise DocumentError(
            name, "bomb", f"holds {len(infos)} ZIP parts, over the {limits.max_zip_members} limit (a zip bomb?); it was not opened"
        )
    total = sum(i.file_size for i in infos)
    if total > limits.max_unzipped_bytes:
        raise DocumentError(
            name, "bomb", f"would unpack to {_mb(total)}, over the {_mb(limits.max_unzipped_bytes)} limit (a zip bomb?); it was not opened"
        )
    for info in infos:
        if info.file_size > MB and info.file_size > limits.max_zip_ratio * max(info.compress_size, 1):
            ratio = info.file_size / max(info.compress_size, 1)
            part, limit = _shown(info.filename), f"{limits.max_zip_ratio:.0f}:1"
            raise DocumentError(
                name,
                "bomb",
                f"has a part ({part}) that unpacks to {ratio:.0f} times its size, over the {limit} limit (a zip bomb?); it was not opened",
            )


def _docx(data: bytes, name: str, limits: Limits) -> Extracted:
    _check_zip(data, name, limits)
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    builder = _SectionBuilder()
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                builder.add(_row_text([cell.text for cell in _unique_cells(row)]))
            continue
        style = block.style.name if block.style is not None else ""
        match = _HEADING_STYLE.match(style or "")
        if match and block.text.strip():
            builder.heading(int(match.group(1)), block.text)
        else:
            builder.add(block.text)
    return Extracted("docx", builder.done())


def _unique_cells(row) -> list:
    """A row's cells with a merged cell once (python-docx repeats it for each grid column it spans)."""
    cells, seen = [], set()
    for cell in row.cells:
        if id(cell._tc) not in seen:
            seen.add(id(cell._tc))
            cells.append(cell)
    return cells


def _row_text(cells: list[str]) -> str:
    return " | ".join(" ".join(c.split()) for c in cells)


PREAMBLE_CHARS = 120  # a section body of one line shorter than this, followed by a sub-section, is a preamble


class _SectionBuilder:
    """Collects lines under the current heading path; a heading starts a new section (its text the first
    line); a section with nothing but its heading is dropped (its words are in its children's paths).

    A preamble, a section whose body is one short line (under PREAMBLE_CHARS: a document title's byline such as
    "Owner: IT Service Desk" or "维护：行政部") followed directly by its first sub-section, is not a section of its own:
    its heading and line open that sub-section's text. Alone it would be a passage of a title and a byline, which
    BM25's length normalisation ranks first for any short question naming the title ("VPN 配置" found
    "VPN 配置指南（Windows）/ 适用系统：..." instead of the passage with the gateway address)."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []
        self.head: list[str] = []  # the section's first lines: a carried preamble, then its heading
        self.lines: list[str] = []  # its body
        self.sections: list[Section] = []

    def heading(self, level: int, text: str) -> None:
        text = normalize(text).replace("\n", " ")
        carry = self._preamble(level)
        if carry is None:
            self._flush()
            carry = []
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))
        self.head, self.lines = [*carry, text], []

    def _preamble(self, level: int) -> list[str] | None:
        """The lines to open a sub-section at `level` with, when the current section is a preamble; else None."""
        if not self.stack or self.stack[-1][0] >= level:
            return None  # not a sub-section of the current section
        body = normalize("\n".join(self.lines))
        if not body:
            return self.head[:-1]  # a heading alone is dropped, but what it carried is passed on
        if "\n" in body or len(body) >= PREAMBLE_CHARS:
            return None
        return [*self.head, body]

    def add(self, text: str) -> None:
        self.lines.append(text)

    def _flush(self) -> None:
        heading = tuple(t for _, t in self.stack)
        body = normalize("\n".join(self.lines))
        if body:
            self.sections.append(Section("\n".join([*self.head, body]), heading=heading))
        elif len(self.head) > 1:  # a carried preamble whose sub-section has no text: kept as it is, never lost
            self.sections.append(Section("\n".join(self.head), heading=heading))
        self.head, self.lines = [], []

    def done(self) -> list[Section]:
        self._flush()
        return self.sections


# --------------------------------------------------------------------------------------------- Markdown


def _markdown(data: bytes, name: str, limits: Limits) -> Extracted:
    from markdown_it import MarkdownIt

    text, encoding = decode_text(data) or ("", None)
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    builder = _SectionBuilder()
    row: list[str] | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "heading_open":
            builder.heading(int(token.tag[1:]), _inline_text(tokens[i + 1]))
            i += 3  # heading_open, inline, heading_close
            continue
        if token.type == "tr_open":
            row = []
        elif token.type == "tr_close" and row is not None:
            builder.add(_row_text(row))
            row = None
        elif token.type == "inline":
            if row is not None:
                row.append(_inline_text(token))
            else:
                builder.add(_inline_text(token))
        elif token.type in ("fence", "code_block"):
            builder.add(token.content)
        i += 1
    return Extracted("markdown", builder.done(), encoding=encoding)


def _inline_text(token) -> str:
    out = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type == "softbreak":
            out.append(" ")  # a wrapped line: a space in English, removed between CJK characters
        elif child.type == "hardbreak":
            out.append("\n")
        elif child.type == "image":
            out.append(child.content)  # the alt text
    return "".join(out)


# ------------------------------------------------------------------------------------------------- text


def _text(data: bytes, name: str, limits: Limits) -> Extracted:
    text, encoding = decode_text(data) or ("", None)
    body = normalize(text)
    return Extracted("text", [Section(body)] if body else [], encoding=encoding)
