"""Files of a marketing-copy batch: the products file in (CSV or XLSX, by content; headers in Chinese or English;
bad rows reported and skipped), the posts file out (CSV with a BOM or XLSX, replaced in one rename), and what a
re-run can skip (a product is done when all its posts are there; keys from the normalised row). The formats,
encodings, headers and resume rules in full: docs/design/copy-batch-files.md.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import unicodedata
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import regex

from ernie_ops.errors import ErnieOpsError
from ernie_ops.files import atomic
from ernie_ops.files.aside import keep_aside
from ernie_ops.marketing import channels
from ernie_ops.marketing.rules import Problem, count_chars

MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_UNZIPPED_BYTES = 200 * 1024 * 1024
# Read while parsing, never after (issue 34): one cell in column XFD made openpyxl pad every row to 16,384 values,
# 3.6 CPU-s for a 41 KB file of 2,000 such rows here, all inside the chat app's process.
MAX_COLUMNS = 64  # a products file has a dozen at most; the rest of a row is not read
MAX_LISTED_PROBLEMS = 100  # bad rows named one by one; more are counted
POSTS_RANGE = (1, 20)
MAX_CHARS_RANGE = (1, 2000)

HEADER_ALIASES: dict[str, tuple[str, ...]] = {
    "product": ("product", "产品", "产品名称", "商品", "商品名称"),
    "selling_points": ("selling_points", "卖点", "产品卖点"),
    "audience": ("audience", "目标人群", "人群", "受众", "目标受众"),
    "tone": ("tone", "语气", "风格", "语调"),
    "posts": ("posts", "条数", "数量", "文案条数"),
    "max_chars": ("max_chars", "字数", "字数上限", "最大字数"),
    "channel": ("channel", "渠道", "平台", "发布渠道"),
}
REQUIRED = ("product", "selling_points", "audience")
OUTPUT_COLUMNS = ("product_key", "product", "post", "posts", "text", "chars", "flags")

_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")
_PLAUSIBLE = regex.compile(
    r"[\x20-\x7e\s\p{Han}\p{Block=CJK_Symbols_And_Punctuation}\p{Block=Halfwidth_And_Fullwidth_Forms}\p{Block=General_Punctuation}\u00b7\u00d7]"
)
_SPACES = regex.compile(r"\s+")


class BatchFileError(ErnieOpsError):
    """A products or posts file cannot be used as a whole; the message names the file and what to do."""


class TooManyRows(BatchFileError):
    """More product rows than the caller's limit: reading stopped there."""

    def __init__(self, path: Path, limit: int):
        super().__init__(f"Products file {path} has more than {limit} rows (chat.marketing.max_batch_rows); split it.")
        self.limit = limit


@dataclass(frozen=True)
class Product:
    """One valid row of the products file; `posts`/`max_chars` None means the run's default."""

    row: int
    product: str
    selling_points: str
    audience: str
    tone: str = ""
    posts: int | None = None
    max_chars: int | None = None
    channel: str = ""  # a name in marketing/channels.py; "" means the run's default
    key: str = field(init=False)

    def __post_init__(self) -> None:
        fields = [
            _normalise(self.product),
            _normalise(self.selling_points),
            _normalise(self.audience),
            _normalise(self.tone),
            self.posts,
            self.max_chars,
        ]
        if self.channel:
            fields.append(self.channel)
        digest = hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode("utf-8")).hexdigest()
        object.__setattr__(self, "key", digest[:16])


@dataclass(frozen=True)
class RowProblem:
    """A row skipped, with its spreadsheet row number."""

    row: int
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.message}"


@dataclass(frozen=True)
class Read:
    """What `read_products` found: the valid rows, the skipped ones, and how the file was read."""

    rows: list[Product]
    problems: list[RowProblem]
    encoding: str | None  # None for XLSX
    format: str  # "csv" or "xlsx"
    ignored_columns: tuple[str, ...] = ()
    unlisted_problems: int = 0  # bad rows past MAX_LISTED_PROBLEMS: counted, not listed

    @property
    def bad_rows(self) -> int:
        return len(self.problems) + self.unlisted_problems


@dataclass(frozen=True)
class PostResult:
    """One post of one product, as written to the posts file."""

    key: str
    product: str
    index: int
    total: int
    text: str
    chars: int
    flags: tuple[str, ...] = ()

    @classmethod
    def of(cls, product: Product, index: int, total: int, text: str, problems: Sequence[Problem] = ()) -> PostResult:
        return cls(product.key, product.product, index, total, text, count_chars(text), tuple(p.flag for p in problems))


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def _header_key(text: str) -> str:
    return _normalise(text).casefold().replace("-", "_").replace(" ", "_")


_ALIAS_TO_FIELD = {_header_key(alias): name for name, aliases in HEADER_ALIASES.items() for alias in aliases}


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise BatchFileError(
                f"{what} {path} is {size} bytes, over the {MAX_FILE_BYTES // (1024 * 1024)} MB limit; split it into smaller files."
            )
        return path.read_bytes()
    except IsADirectoryError:
        raise BatchFileError(f"{what} {path} is a directory, not a CSV or XLSX file.") from None
    except OSError as e:
        raise BatchFileError(f"{what} {path} cannot be read ({e.strerror or e}); check the path and its permissions.") from None


# --- products file ---------------------------------------------------------------------------------------


def read_products(path: Path | str, max_rows: int | None = None) -> Read:
    """The products in a CSV or XLSX file; malformed rows reported and skipped, a bad file BatchFileError. Reading
    stops at `max_rows` rows after the header (TooManyRows) and at MAX_COLUMNS columns."""
    path = Path(path)
    data = _read_bytes(path, "Products file")
    if not data.strip(b" \t\r\n\xef\xbb\xbf"):
        raise BatchFileError(f"Products file {path} is empty; it needs a header row and one row per product.")
    if data.startswith(b"PK\x03\x04"):
        return _table(path, _xlsx_rows(path, data), encoding=None, fmt="xlsx", max_rows=max_rows)
    if data.startswith(_OLE2_MAGIC):
        if _ENCRYPTION_INFO in data:
            raise BatchFileError(
                f"Products file {path} is a password-protected workbook; save it without a password (or as CSV) and try again."
            )
        raise BatchFileError(f"Products file {path} is an old Excel 97-2003 (.xls) or other Office file; save it as .xlsx or CSV UTF-8.")
    text, encoding = _decode(path, data)
    return _table(path, _csv_rows(path, text), encoding=encoding, fmt="csv", max_rows=max_rows)


def _decode(path: Path, data: bytes) -> tuple[str, str]:
    if data.startswith(b"\xef\xbb\xbf"):
        candidates = ["utf-8-sig"]
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        candidates = ["utf-16"]
    elif b"\x00" in data:
        raise BatchFileError(f"Products file {path} is a binary file, not CSV or XLSX; save it as CSV UTF-8 or .xlsx.")
    else:
        candidates = ["utf-8", "gb18030"]
    for encoding in candidates:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if encoding == "gb18030" and len(_PLAUSIBLE.findall(text)) < 0.95 * len(text):
            continue
        return text, encoding
    raise BatchFileError(f"Products file {path} is neither UTF-8 nor GBK/GB18030 text, nor XLSX; save it as CSV UTF-8 or .xlsx.")


def _csv_rows(path: Path, text: str) -> Iterator[tuple[int, list[object]]]:
    first_line = text.split("\n", 1)[0]
    delimiter = "\t" if "\t" in first_line and "," not in first_line else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    row = 0
    try:
        for record in reader:
            row += 1
            yield row, record[:MAX_COLUMNS]
    except csv.Error as e:
        raise BatchFileError(f"Products file {path} is not valid CSV after row {row} ({e}); check its quotes.") from None


def _xlsx_rows(path: Path, data: bytes) -> Iterator[tuple[int, list[object]]]:
    import openpyxl  # imported here: only batch work with XLSX needs it

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
    except zipfile.BadZipFile:
        raise BatchFileError(f"Products file {path} is a damaged ZIP/XLSX file; open it in Excel and save it again.") from None
    names = {i.filename for i in infos}
    if "xl/workbook.xml" not in names:
        raise BatchFileError(f"Products file {path} is a ZIP file but not an XLSX workbook (a .docx?); give a .xlsx or CSV file.")
    if sum(i.file_size for i in infos) > MAX_UNZIPPED_BYTES:
        raise BatchFileError(
            f"Products file {path} unpacks to more than {MAX_UNZIPPED_BYTES // (1024 * 1024)} MB; split it into smaller files."
        )
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as e:  # openpyxl raises many kinds (KeyError, ValueError, XML errors) for a damaged file
        raise BatchFileError(
            f"Products file {path} is a damaged XLSX workbook ({type(e).__name__}); open it in Excel and save it again."
        ) from None
    try:
        sheet = workbook.active if workbook.active is not None else workbook.worksheets[0]
        sheet.reset_dimensions()  # some writers declare a wrong size (e.g. "A1"), which would cut rows in read-only mode
        for number, values in enumerate(sheet.iter_rows(values_only=True, max_col=MAX_COLUMNS), start=1):
            yield number, list(values)
    finally:
        workbook.close()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _whole(value: object, name: str, limits: tuple[int, int]) -> tuple[int | None, str | None]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, None
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = int(value.strip())
    if number is None:
        return None, f"{name} {_cell(value)!r} is not a whole number"
    low, high = limits
    if not low <= number <= high:
        return None, f"{name} {number} is outside {low}..{high}"
    return number, None


def _table(path: Path, rows: Iterable[tuple[int, list[object]]], *, encoding: str | None, fmt: str, max_rows: int | None = None) -> Read:
    iterator = iter(rows)
    header: list[str | None] | None = None
    ignored: list[str] = []
    for _number, values in iterator:
        if any(_cell(v) for v in values):
            header, ignored = _map_header(path, values)
            break
    if header is None:
        raise BatchFileError(f"Products file {path} has no rows; it needs a header row and one row per product.")
    products: list[Product] = []
    problems: list[RowProblem] = []
    unlisted = 0
    seen: dict[str, int] = {}
    taken = 0
    for number, values in iterator:
        cells = [_cell(v) for v in values]
        if not any(cells):
            continue
        taken += 1
        if max_rows is not None and taken > max_rows:
            raise TooManyRows(path, max_rows)
        record: dict[str, object] = {}
        extra: list[str] = []
        for i, value in enumerate(values):
            name = header[i] if i < len(header) else None
            if name is None:
                if cells[i]:
                    extra.append(cells[i])
            elif name != "":
                record[name] = value
        messages: list[str] = []
        if extra:
            messages.append(f"{len(extra)} value(s) under no header (extra column: {', '.join(repr(e) for e in extra[:3])})")
        missing = [name for name in REQUIRED if not _cell(record.get(name))]
        if missing:
            messages.append(f"{', '.join(missing)} empty")
        posts, error = _whole(record.get("posts"), "posts", POSTS_RANGE)
        if error:
            messages.append(error)
        max_chars, error = _whole(record.get("max_chars"), "max_chars", MAX_CHARS_RANGE)
        if error:
            messages.append(error)
        channel = _cell(record.get("channel"))
        if channel and channels.resolve(channel) is None:
            messages.append(f"channel {channel!r} is not one of {channels.names()}")
        if messages:
            if len(problems) < MAX_LISTED_PROBLEMS:
                problems.append(RowProblem(number, "; ".join(messages) + "; skipped."))
            else:
                unlisted += 1
            continue
        product = Product(
            row=number,
            product=_cell(record["product"]),
            selling_points=_cell(record["selling_points"]),
            audience=_cell(record["audience"]),
            tone=_cell(record.get("tone")),
            posts=posts,
            max_chars=max_chars,
            channel=channels.resolve(channel) or "",
        )
        if product.key in seen:
            if len(problems) < MAX_LISTED_PROBLEMS:
                problems.append(RowProblem(number, f"the same product as row {seen[product.key]}; skipped."))
            else:
                unlisted += 1
            continue
        seen[product.key] = number
        products.append(product)
    return Read(rows=products, problems=problems, encoding=encoding, format=fmt, ignored_columns=tuple(ignored), unlisted_problems=unlisted)


def _map_header(path: Path, values: list[object]) -> tuple[list[str | None], list[str]]:
    """Each header cell -> a field name, "" for a named column that is ignored, None for an empty one."""
    mapped: list[str | None] = []
    ignored: list[str] = []
    where: dict[str, int] = {}
    for i, value in enumerate(values):
        text = _cell(value)
        if not text:
            mapped.append(None)
            continue
        name = _ALIAS_TO_FIELD.get(_header_key(text))
        if name is None:
            ignored.append(text)
            mapped.append("")
            continue
        if name in where:
            raise BatchFileError(f"Products file {path} names the {name} column twice (columns {where[name] + 1} and {i + 1}); keep one.")
        where[name] = i
        mapped.append(name)
    if not where:
        raise BatchFileError(
            f"Products file {path} has no header row; its first row must name the columns"
            " product, selling_points, audience (or 产品, 卖点, 目标人群)."
        )
    missing = [name for name in REQUIRED if name not in where]
    if missing:
        names = ", ".join(f"{m} ({HEADER_ALIASES[m][1]})" for m in missing)
        raise BatchFileError(f"Products file {path} has no column {names}; add it to the header row.")
    return mapped, ignored


# --- posts file --------------------------------------------------------------------------------------------


def _output_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".xlsx"):
        raise BatchFileError(f"Output file {path} must end in .csv or .xlsx, which decides its format.")
    return suffix[1:]


def _row_values(result: PostResult) -> list[object]:
    return [result.key, result.product, result.index, result.total, result.text, result.chars, "; ".join(result.flags)]


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a CSV cell starting so as a formula (OWASP)


def _csv_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula gets a leading ' (a product named '=HYPERLINK(...)' stays text)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def _csv_text(value: object) -> object:
    """What `_csv_cell` wrote, back: the ' it added goes (so a posts file read and rewritten is unchanged)."""
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(FORMULA_START):
        return value[1:]
    return value


def write_posts(path: Path | str, results: Sequence[PostResult]) -> None:
    """Write the posts file (CSV UTF-8 with BOM, or XLSX, by extension) in one rename; BatchFileError if not."""
    path = Path(path)
    fmt = _output_format(path)
    if fmt == "csv":
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(OUTPUT_COLUMNS)
        writer.writerows([_csv_cell(v) for v in _row_values(r)] for r in results)
        payload = text.getvalue().encode("utf-8-sig")
    else:
        payload = _xlsx_bytes(results)
    try:
        atomic.write_bytes(path, payload)  # keeps an existing file's mode, 0644 for a new one
    except OSError as e:
        raise BatchFileError(f"Output file {path} cannot be written ({e.strerror or e}); check the directory and free space.") from None


def _xlsx_bytes(results: Sequence[PostResult]) -> bytes:
    import openpyxl
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "posts"
    sheet.append(list(OUTPUT_COLUMNS))
    for number, result in enumerate(results, start=2):
        for column, value in enumerate(_row_values(result), start=1):
            if isinstance(value, str):
                cell = sheet.cell(row=number, column=column, value=ILLEGAL_CHARACTERS_RE.sub("\ufffd", value))
                cell.data_type = "s"  # text, even when it starts with "="
            else:
                sheet.cell(row=number, column=column, value=value)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def _read_output_rows(path: Path, data: bytes) -> list[list[object]]:
    fmt = _output_format(path)
    if fmt == "xlsx":
        import openpyxl

        try:
            workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
            try:
                return [list(r) for r in workbook.worksheets[0].iter_rows(values_only=True)]
            finally:
                workbook.close()
        except Exception as e:  # a damaged workbook: openpyxl raises many kinds
            raise BatchFileError(
                f"Output file {path} is a damaged XLSX workbook ({type(e).__name__}); move it away or choose another output."
            ) from None
    if not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]  # the torn last line (a multi-byte character cut in two is in it)
    try:
        text = data.decode("utf-8-sig")
        return [[_csv_text(v) for v in r] for r in csv.reader(io.StringIO(text, newline=""))]
    except UnicodeDecodeError:
        raise BatchFileError(f"Output file {path} is not a UTF-8 posts file; move it away or choose another output.") from None
    except csv.Error as e:
        raise BatchFileError(f"Output file {path} is not a CSV posts file ({e}); move it away or choose another output.") from None


def _post_row(values: list[object]) -> PostResult | None:
    if len(values) != len(OUTPUT_COLUMNS):
        return None
    key, product, index, total, text, chars, flags = values
    try:
        index, total, chars = int(str(index)), int(str(total)), int(str(chars))
    except ValueError:
        return None
    key = _cell(key)
    if not regex.fullmatch(r"[0-9a-f]{16}", key) or not 1 <= index <= total:
        return None
    flag_text = _cell(flags)
    return PostResult(
        key, _cell(product), index, total, "" if text is None else str(text), chars, tuple(flag_text.split("; ")) if flag_text else ()
    )


def read_posts(path: Path | str) -> tuple[list[PostResult], int]:
    """The posts of every finished product in an existing output, and how many rows were not counted
    (torn, unparsable, or of an unfinished product); ([], 0) when there is no output yet."""
    path = Path(path)
    if not path.exists():
        return [], 0
    data = _read_bytes(path, "Output file")
    if not data.strip(b" \t\r\n\xef\xbb\xbf"):
        return [], 0
    rows = _read_output_rows(path, data)
    if not rows or [_cell(v) for v in rows[0]] != list(OUTPUT_COLUMNS):
        raise BatchFileError(
            f"Output file {path} exists and is not a posts file (its header is not {', '.join(OUTPUT_COLUMNS)}); choose another output."
        )
    by_key: dict[str, dict[int, PostResult]] = {}
    dropped = 0
    for values in rows[1:]:
        if not any(_cell(v) for v in values):
            continue
        post = _post_row(values)
        if post is None:
            dropped += 1
            continue
        by_key.setdefault(post.key, {})[post.index] = post
    finished: list[PostResult] = []
    for posts in by_key.values():
        totals = {p.total for p in posts.values()}
        if len(totals) == 1 and set(posts) == set(range(1, totals.pop() + 1)):
            finished.extend(posts[i] for i in sorted(posts))
        else:
            dropped += len(posts)
    return finished, dropped


def done_keys(output_path: Path | str) -> set[str]:
    """Keys of the products whose posts are all in the output already (a re-run skips them)."""
    finished, _dropped = read_posts(output_path)
    return {p.key for p in finished}


def append_posts(path: Path | str, results: Sequence[PostResult]) -> list[PostResult]:
    """Add the posts of products not already finished in the output; returns the posts added.

    The file is rewritten in one rename with the finished posts first; rows that were not finished are
    dropped from it (their products are not done and get regenerated), the previous file kept aside first."""
    path = Path(path)
    finished, dropped = read_posts(path)
    done = {p.key for p in finished}
    new = [r for r in results if r.key not in done]
    if dropped:
        keep_aside(path)
    write_posts(path, [*finished, *new])
    return new
