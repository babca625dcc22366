"""`batch_io.read_products` in a child process (files/child.py): a products file a user uploads in the chat is
parsed under a memory cap and a time limit, outside the app's process, so a hostile workbook costs the child and
the other users' logins and answers never wait on it. The result is the same `Read`, the errors the same sentences.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, fields
from pathlib import Path

from ernie_ops.files import child
from ernie_ops.marketing import batch_io
from ernie_ops.marketing.batch_io import BatchFileError, Product, Read, RowProblem, TooManyRows

MODULE = "ernie_ops.marketing.read_isolated"
_PRODUCT_FIELDS = [f.name for f in fields(Product) if f.init]


async def read_products(path: Path, max_rows: int | None, *, timeout: float, memory_mb: int) -> Read:
    """read_products(path, max_rows) in a child; BatchFileError (TooManyRows included) as in-process, plus the
    time limit and the memory cap as sentences naming the file."""
    ended = await child.run(MODULE, {"path": str(path), "max_rows": max_rows, "memory_mb": memory_mb}, timeout)
    if ended.timed_out:
        raise BatchFileError(
            f"Products file {path} took over {timeout:g} s to read and was stopped; save it again as CSV UTF-8 or a plain .xlsx."
        )
    answer = ended.answer or {}
    error = answer.get("error")
    if isinstance(error, dict):
        if error.get("reason") == "memory":
            raise BatchFileError(
                f"Products file {path} needed more than {memory_mb} MB to read and was stopped; split it into smaller files."
            )
        if error.get("reason") == "too_many_rows" and max_rows is not None:
            raise TooManyRows(path, max_rows)
        raise BatchFileError(str(error.get("message") or f"Products file {path} could not be read."))
    if isinstance(answer.get("ok"), dict):
        return _read_from(answer["ok"])
    said = f": {ended.last_error_line()}" if ended.last_error_line() else ""
    raise BatchFileError(f"Products file {path} could not be read (the reader stopped with status {ended.returncode}{said}).")


def _read_to(read: Read) -> dict:
    return {
        "rows": [{name: getattr(p, name) for name in _PRODUCT_FIELDS} for p in read.rows],
        "problems": [asdict(p) for p in read.problems],
        "encoding": read.encoding,
        "format": read.format,
        "ignored_columns": list(read.ignored_columns),
        "unlisted_problems": read.unlisted_problems,
    }


def _read_from(data: dict) -> Read:
    return Read(
        rows=[Product(**row) for row in data["rows"]],
        problems=[RowProblem(**p) for p in data["problems"]],
        encoding=data["encoding"],
        format=data["format"],
        ignored_columns=tuple(data["ignored_columns"]),
        unlisted_problems=int(data["unlisted_problems"]),
    )


def _job(request: dict) -> dict:
    try:
        return {"ok": _read_to(batch_io.read_products(request["path"], request["max_rows"]))}
    except TooManyRows as exc:
        return {"error": {"reason": "too_many_rows", "message": str(exc)}}
    except BatchFileError as exc:
        return {"error": {"reason": "file", "message": str(exc)}}


if __name__ == "__main__":
    sys.exit(child.serve(_job))
