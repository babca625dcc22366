"""The consoles every command prints through: results on stdout, progress, warnings and errors on stderr.

Human output is rich markup; machine output (--json) is one JSON document on stdout (`print_json`).
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


def print_json(data: Any, **dumps: Any) -> None:
    """`data` as JSON on stdout, unstyled (scripts and Ansible parse it); `dumps` go to json.dumps."""
    print(json.dumps(data, **dumps))


def plain(line: str, *, err: bool = False) -> None:
    """One line exactly as given: no markup, emoji codes or highlighting read into it (file names, user text)."""
    console = err_console if err else out_console
    console.print(line, soft_wrap=True, markup=False, highlight=False, emoji=False)


def print_error(message: str) -> None:
    """The one form of a failed command's message: `error: ...` on stderr."""
    err_console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
