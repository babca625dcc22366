"""`ernie-ops docs add|sync|list|remove|search|embed`: the document Q&A index (the work is docs/commands)."""

from __future__ import annotations

import argparse
import functools

from rich.markup import escape

from ernie_ops import config
from ernie_ops.cli.args import Subcommands, subcommands
from ernie_ops.cli.console import err_console, out_console, print_json
from ernie_ops.errors import EXIT_FAILED, EXIT_OK


def register(sub: Subcommands) -> None:
    d = sub.add_parser("docs", help="the document Q&A index: add, sync, list, remove, search, embed")
    dsub = subcommands(d, "docs_command")
    da = dsub.add_parser("add", help="index files (a directory: every .pdf .md .txt .docx under it)")
    da.add_argument("paths", nargs="+", metavar="PATH")
    dsy = dsub.add_parser("sync", help="make a collection hold exactly the documents under DIR (unchanged files are not re-read)")
    dsy.add_argument("directory", metavar="DIR")
    dsy.add_argument("--check", action="store_true", help="say what would change (by checksum), change nothing")
    dl = dsub.add_parser("list", help="the indexed documents")
    dl.add_argument("--uploads", action="store_true", help="also the chat users' own uploads")
    dr = dsub.add_parser("remove", help="remove documents by name (or --all of a collection)")
    dr.add_argument("names", nargs="*", metavar="NAME")
    dr.add_argument("--all", action="store_true", help="every document of the collection")
    ds = dsub.add_parser("search", help="the ranked passages for a question")
    ds.add_argument("question")
    ds.add_argument("-k", type=int, default=None, help="how many passages (default: chat.docs.top_k)")
    de = dsub.add_parser("embed", help="give the passages without a vector theirs (embeddings turned on after indexing); a rerun continues")
    de.add_argument("--uploads", action="store_true", help="also the chat users' own uploads")
    for name, sp in (("add", da), ("sync", dsy), ("list", dl), ("remove", dr), ("search", ds), ("embed", de)):
        many = name in ("list", "search", "embed")
        sp.add_argument(
            "--collection", "-c", action="append" if many else None, default=None if many else "default",
            help="collection(s) to show or search (default: all)" if many else "the shared collection (default: 'default')",
        )  # fmt: skip
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.set_defaults(func=functools.partial(run, name))


def run(name: str, args: argparse.Namespace) -> int:
    """Unpack the subcommand's arguments, call its typed function in docs/commands, print what it returned."""
    from ernie_ops.docs import commands  # lazy: +31 ms start-up (-X importtime); only docs needs it

    cfg = config.load(args.config).chat.docs
    c = args.collection
    calls = {
        "add": lambda: commands.add(cfg, args.paths, c),
        "sync": lambda: commands.sync(cfg, args.directory, c, args.check),
        "list": lambda: commands.list_documents(cfg, c, args.uploads),
        "remove": lambda: commands.remove(cfg, c, args.names, args.all),
        "search": lambda: commands.search(cfg, args.question, c, args.k),
        "embed": lambda: commands.embed(cfg, c, args.uploads),
    }
    result = calls[name]()
    if args.json:
        print_json(result.data, indent=2, ensure_ascii=False)
    else:
        for line in result.lines:
            out_console.print(line, soft_wrap=True, markup=False, highlight=False)
        for line in result.errors:
            err_console.print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
    return EXIT_OK if result.ok else EXIT_FAILED
