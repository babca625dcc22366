"""What a hostile products workbook costs the chat app's process (issue 34, item 4): every row holds a cell in column
XFD, so a reader that pads rows walks 16,384 cells per row. Built as raw SpreadsheetML (inline strings) to about the
size asked; then read in-process (`marketing.batch_io.read_products`, what the app did before) and in the isolated
child (`marketing.read_isolated`, what it does now), each with the caller's and the children's CPU seconds.

    python -m benchmarks.hostile_products [--mb 1.0] [--max-rows 500] [--only inprocess|isolated]

Run it with PYTHONPATH pointing at an older checkout to measure that code's in-process reader (`--only inprocess`).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import resource
import signal
import tempfile
import time
import zipfile
from pathlib import Path

PARTS = {
    "[Content_Types].xml": '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
    'ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument'
    '.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-'
    'officedocument.spreadsheetml.worksheet+xml"/></Types>',
    "_rels/.rels": '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="xl/workbook.xml"/></Relationships>',
    "xl/workbook.xml": '<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="products" sheetId="1" r:id="rId1"/>'
    "</sheets></workbook>",
    "xl/_rels/workbook.xml.rels": '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
    '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
    'Target="worksheets/sheet1.xml"/></Relationships>',
}


def _cell(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def hostile_workbook(path: Path, rows: int) -> None:
    head = "".join(_cell(f"{c}1", t) for c, t in zip("ABC", ("product", "selling_points", "audience"), strict=True))
    body = "".join(
        f'<row r="{r}">{_cell(f"A{r}", f"cup{r}")}{_cell(f"B{r}", "warm")}{_cell(f"C{r}", "office")}{_cell(f"XFD{r}", "x")}</row>'
        for r in range(2, rows + 2)
    )
    sheet = (
        '<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        f'<sheetData><row r="1">{head}</row>{body}</sheetData></worksheet>'
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in {**PARTS, "xl/worksheets/sheet1.xml": sheet}.items():
            z.writestr(name, text)


def of_size(path: Path, mb: float) -> int:
    """A hostile workbook of about `mb` MB; the rows it holds."""
    rows = 20_000
    hostile_workbook(path, rows)
    rows = max(1, int(rows * mb * 1e6 / path.stat().st_size))
    hostile_workbook(path, rows)
    return rows


def cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def measure(label: str, read, limit: float) -> None:
    (own0, kids0), t0 = cpu(), time.monotonic()
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError))
    signal.alarm(int(limit))
    try:
        got = read()
        outcome = f"{len(got.rows)} rows read"
    except TimeoutError:
        outcome = f"stopped at {limit:.0f} s"
    except Exception as exc:  # the reader's own refusal is an outcome too
        outcome = f"refused: {str(exc)[:90]}"
    finally:
        signal.alarm(0)
    own1, kids1 = cpu()
    print(f"| {label} | {own1 - own0:.2f} | {kids1 - kids0:.2f} | {time.monotonic() - t0:.1f} | {outcome} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1.0, help="the workbook's size (default 1 MB)")
    ap.add_argument("--max-rows", type=int, default=500, help="the app's row cap (chat.marketing.max_batch_rows)")
    ap.add_argument("--only", choices=("inprocess", "isolated"))
    ap.add_argument("--limit", type=float, default=600, help="wall seconds a reader may take before it is stopped")
    args = ap.parse_args()
    from ernie_ops.marketing import batch_io

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.xlsx"
        rows = of_size(path, args.mb)
        print(f"{path.stat().st_size / 1e6:.2f} MB, {rows} rows each with a cell in column XFD, row cap {args.max_rows}\n")
        print("| reader | app process CPU s | child CPU s | wall s | outcome |\n|---|---|---|---|---|")
        if args.only != "isolated":
            capped = "max_rows" in inspect.signature(batch_io.read_products).parameters  # before issue 34: the cap came after
            measure(
                "in-process (batch_io.read_products)" + ("" if capped else ", the whole file read, then the cap"),
                lambda: batch_io.read_products(path, args.max_rows) if capped else batch_io.read_products(path),
                args.limit,
            )
        if args.only != "inprocess":
            from ernie_ops.marketing import read_isolated

            measure(
                "isolated child (read_isolated, 60 s / 1 GB caps)",
                lambda: asyncio.run(read_isolated.read_products(path, args.max_rows, timeout=60, memory_mb=1024)),
                args.limit,
            )


if __name__ == "__main__":
    main()
