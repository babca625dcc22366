"""`ernie-ops`: argument parsing, human (rich) or machine (--json) output, exit codes.

Exit codes: 0 ok, 1 the action failed, 2 usage or config error. Every action is a function in
another module; this file only parses, calls and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from ernie_ops import __version__, config
from ernie_ops.copy import commands as copy_commands
from ernie_ops.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, ErnieOpsError, UsageError
from ernie_ops.hr import commands as hr_commands
from ernie_ops.traffic.runbook import Outcome

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 1024-65535")
    return value


def _remote_url(text: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise argparse.ArgumentTypeError(f"'{text}' is not a gateway URL like http://10.0.0.5:80 (scheme, address, optional port)")
    return text.rstrip("/")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is 2 as well; keep the message short
        self.print_usage(sys.stderr)
        err_console.print(f"[red]error:[/] {message}")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ernie-ops", description="Operate ERNIE-4.5-0.3B-PT on vLLM behind systemd and nginx.")
    p.add_argument("--version", action="version", version=f"ernie-ops {__version__}")
    p.add_argument("--config", help=f"config file (default: ${config.ENV_VAR} or {config.DEFAULT_PATH})")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("serve", help="run one vLLM instance under systemd (the unit's ExecStart)")
    s.add_argument("port", type=_port)
    s.set_defaults(func=cmd_serve)

    for name, helptext in (
        ("cutover", "move traffic to instance PORT with zero lost requests"),
        ("rollback", "back to the previous instance"),
    ):
        cp = sub.add_parser(name, help=helptext)
        if name == "cutover":
            cp.add_argument("port", type=_port, nargs="?", help="the instance to route to")
            cp.add_argument("--from", dest="source", type=_port, help="the instance to retire (default: the routed one)")
            cp.add_argument("--canary", metavar="STEPS", help="percent steps before 100%%, e.g. 5,25,50 (default: cutover.canary_steps)")
            cp.add_argument(
                "--bake", metavar="DURATION", help="watch with the old instance warm, e.g. 10m; 0: none (default: cutover.bake_seconds)"
            )
            cp.add_argument("--sticky", choices=("none", "api_key", "client"), help="keep a client on one side during canary steps")
            end = cp.add_mutually_exclusive_group()
            end.add_argument("--promote", action="store_true", help="end the canary/bake in progress: all traffic to the new instance")
            end.add_argument("--abort", action="store_true", help="end the canary/bake in progress: all traffic back to the old instance")
        cp.add_argument("--start-timeout", type=float, default=900.0, help="seconds for the new instance to become READY")
        cp.add_argument("--verify-timeout", type=float, default=15.0, help="seconds for the gateway to answer from the new port")
        cp.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to wait for the old instance to go idle")
        cp.add_argument("--dry-run", action="store_true", help="run the preflight and print the plan only")
        cp.add_argument("--json", action="store_true", help="machine-readable result")
        cp.set_defaults(func=cmd_cutover)

    b = sub.add_parser("bench", help="streaming load against the gateway (default) or one instance")
    target = b.add_mutually_exclusive_group()
    target.add_argument("--url", help="base URL (default: gateway.url from the config)")
    target.add_argument("--port", type=_port, help="one instance on 127.0.0.1, bypassing nginx")
    b.add_argument("-c", "--concurrency", type=int, default=16)
    amount = b.add_mutually_exclusive_group()
    amount.add_argument("-d", "--duration", type=float, help="seconds of load (default 30)")
    amount.add_argument("-n", "--count", type=int, help="number of requests")
    b.add_argument("--prompt-tokens", type=int, default=512)
    b.add_argument("--max-tokens", type=int, default=256)
    b.add_argument("--processes", type=int, default=0, help="worker processes (default: by cores and concurrency)")
    b.add_argument("--json", action="store_true", help="machine-readable report")
    b.set_defaults(func=cmd_bench)

    lg = sub.add_parser("logs", help="the service's logs merged in time order: instances, chat app, gateway, cutover decisions")
    lg.add_argument("sources", nargs="*", metavar="SOURCE", help="an instance PORT, chat, gateway or ernie-ops (default: all)")
    lg.add_argument("-f", "--follow", action="store_true", help="then print new lines as they come (Ctrl-C ends)")
    lg.add_argument("-n", "--lines", type=int, default=100, help="the last N lines of the merged log (default 100)")
    lg.add_argument("--since", help="from a duration ago (10m, 2h) or a date-time ('2026-12-02 14:00')")
    lg.add_argument("--json", action="store_true", help="one JSON object per line (time, source, message; request for the gateway)")
    lg.add_argument("--phases", action="store_true", help="instances: only the launcher's phase lines, not vLLM's")
    lg.set_defaults(func=cmd_logs)

    tp = sub.add_parser("top", help="live: each instance's req/s, queue, KV cache, TTFT, errors over a sliding window")
    tp.add_argument("--window", type=float, default=10.0, help="seconds the numbers cover (deltas of vLLM's counters)")
    tp.add_argument("--interval", type=float, default=1.0, help="seconds between frames")
    tp.add_argument("--once", action="store_true", help="one frame (two scrapes --interval apart), then exit")
    tp.add_argument("--json", action="store_true", help="with --once: the frame as JSON")
    tp.set_defaults(func=cmd_top)

    mo = sub.add_parser("monitoring", help="what Prometheus scrapes here: targets, probes, its config (the ernie_monitoring role)")
    mosub = mo.add_subparsers(dest="monitoring_command", required=True, parser_class=_Parser)
    mr = mosub.add_parser("render", help="every monitoring file as JSON {name: text}: prometheus.yml, blackbox.yml, file_sd, paths")
    mr.add_argument("--host", required=True, help="the host label of every series (the inventory name)")
    mr.add_argument("--sd-dir", default="/etc/prometheus/file_sd", help="where the file_sd files go")
    mr.add_argument("--rules", action="append", help="a rule file prometheus.yml loads (repeatable)")
    mr.add_argument("--node", default="127.0.0.1:9100", help="the node exporter's address ('' for none)")
    mr.add_argument("--blackbox", default="127.0.0.1:9115", help="the blackbox exporter's address ('' for none)")
    mr.add_argument("--probe-key-file", help="the file holding the bearer key the completion probe sends (gateway with API keys)")
    mr.add_argument("--remote-url", type=_remote_url, help="this gateway's URL from a central Prometheus: adds remote/*@HOST.json")
    mr.set_defaults(func=cmd_monitoring_render)

    gw = sub.add_parser("gateway", help="what nginx in front of the chat app takes, from ernie.yaml (roles ernie_nginx, ernie_edge)")
    gwsub = gw.add_subparsers(dest="gateway_command", required=True, parser_class=_Parser)
    gl = gwsub.add_parser("limits", help="as JSON: the body limit (MB) of the chat's upload location, from chat.docs.max_file_mb")
    gl.set_defaults(func=cmd_gateway_limits)

    st = sub.add_parser("status", help="instances, health, load, and where nginx routes")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_status)

    rt = sub.add_parser("route", help="the routed instance and the spare (a fresh host: the initial route)")
    rt.add_argument("--initial", type=_port, help="port routed first on a fresh host (default: the first configured instance)")
    rt.add_argument("--init", action="store_true", help="fresh host: write the upstream include naming the initial port")
    rt.add_argument("--check", action="store_true", help="with --init: say whether it would write, write nothing")
    rt.add_argument("--json", action="store_true", help="machine-readable output")
    rt.set_defaults(func=cmd_route)

    ap = sub.add_parser("apply", help="after provisioning changed files: start, cut over or restart what runs older inputs")
    ap.add_argument("--only", choices=("engine", "chat"), help="one service (default: both)")
    ap.add_argument("--mode", choices=("cutover", "restart", "none"), default="cutover", help="how a changed engine input reaches traffic")
    ap.add_argument("--initial", type=_port, help="port routed first on a fresh host (default: the first configured instance)")
    ap.add_argument("--no-start", action="store_true", help="do not start a service that is not running")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds for a starting instance to become READY")
    ap.add_argument("--check", action="store_true", help="report what would be done, do nothing")
    ap.add_argument("--json", action="store_true", help="machine-readable result")
    ap.set_defaults(func=cmd_apply)

    c = sub.add_parser("config", help="inspect the config")
    csub = c.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    cc = csub.add_parser("check", help="validate and print the resolved config, or every error")
    cc.add_argument("--json", action="store_true", help="machine-readable output")
    cc.set_defaults(func=cmd_config_check)

    ch = sub.add_parser("chat", help="run the Chainlit chat app (ernie-chainlit.service's ExecStart; by hand for development)")
    ch.add_argument("--host", help="listen address (default: chat.host)")
    ch.add_argument("--port", type=_port, help="listen port (default: chat.port)")
    ch.add_argument("--state-dir", help="Chainlit's writable app root (default: $STATE_DIRECTORY, else ~/.local/state/ernie-ops-chat)")
    ch.set_defaults(func=cmd_chat)

    d = sub.add_parser("docs", help="the document Q&A index: add, sync, list, remove, search, embed")
    dsub = d.add_subparsers(dest="docs_command", required=True, parser_class=_Parser)
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
        sp.set_defaults(func=cmd_docs)

    hr_commands.register(sub)  # `ernie-ops hr check FILE` (ernie_ops/hr/commands.py)

    copy_commands.register(sub, _Parser)  # `ernie-ops copy batch` (ernie_ops/copy/commands.py)

    cu = sub.add_parser("chat-user", help="manage the chat's users file (scrypt-hashed passwords)")
    cusub = cu.add_subparsers(dest="user_command", required=True, parser_class=_Parser)
    for name, helptext in (("add", "add a user or set a new password (read from stdin, or asked twice)"), ("remove", "remove a user")):
        cp = cusub.add_parser(name, help=helptext)
        cp.add_argument("name")
        cp.add_argument("--users-file", help="default: chat.users_file from the config")
        cp.set_defaults(func=cmd_chat_user)
    cl = cusub.add_parser("list", help="the user names")
    cl.add_argument("--users-file", help="default: chat.users_file from the config")
    cl.set_defaults(func=cmd_chat_user)
    return p


def cmd_serve(args: argparse.Namespace) -> int:
    from ernie_ops.serving import launcher

    launcher.setup_logging()
    cfg = config.load(args.config)
    return launcher.serve(cfg, args.port)


def _print_step(step) -> None:
    mark = "[green]✓[/]" if step.ok else "[red]✗[/]"
    err_console.print(f"{mark} {step.name:<24} {step.seconds:7.2f}s  {step.detail}", soft_wrap=True)


def cmd_cutover(args: argparse.Namespace) -> int:
    # imported here, like each command's module: the runbook and its canary add ~60 ms (httpx, prometheus_client)
    # to the start of every other command (measured: `import ernie_ops.cli`, then these)
    from ernie_ops.traffic import cutover
    from ernie_ops.traffic.canary import rollout

    cfg = config.load(args.config)
    timeouts = cutover.Timeouts(start=args.start_timeout, verify=args.verify_timeout, drain=args.drain_timeout)
    on_step = None if args.json else _print_step
    if args.command == "rollback":
        result = cutover.rollback(cfg, timeouts=timeouts, dry_run=args.dry_run, on_step=on_step)
    elif args.promote or args.abort:
        if args.port is not None or args.canary or args.bake or args.source:
            raise UsageError("--promote / --abort end the rollout in progress; give no port, --from, --canary or --bake")
        result = cutover.end_rollout(cfg, "promote" if args.promote else "abort", timeouts=timeouts, on_step=on_step)
    else:
        if args.port is None:
            raise UsageError("name the instance to route to: ernie-ops cutover PORT (or --promote / --abort)")
        plan = rollout.Plan.chosen(cfg.cutover, args.canary, args.bake, args.sticky)
        job = cutover.Cutover(cfg, args.port, source=args.source, timeouts=timeouts, dry_run=args.dry_run, on_step=on_step, plan=plan)
        if plan.watched:
            rollout.abort_on_signals(Path(cfg.paths.state_dir))  # Ctrl-C during the watch = --abort
            if not args.json:
                err_console.print(f"plan: {plan.describe()} (Ctrl-C rolls back)")
        result = job.run()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        for w in result.warnings:
            err_console.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
        if result.ok:
            messages = {
                Outcome.PROMOTED: f"traffic on {result.target}, {result.source} retired after the watch",
                Outcome.ALREADY_ACTIVE: f"{result.target} is already the routed instance and serves; nothing changed",
                Outcome.CONVERGED: f"{result.target} was already routed; finished the interrupted cutover",
                Outcome.DRY_RUN: "dry run: preflight passed, nothing changed",
            }
            out_console.print(f"[green]{args.command} {result.outcome}[/]: {messages.get(result.outcome, f'traffic on {result.target}')}")
        else:
            where = f"; {result.where}" if result.where else ""  # the runbook's own words, from what the gateway answered
            err_console.print(f"[red]{args.command} {result.outcome}[/]: {result.error}{where}", soft_wrap=True)
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_bench(args: argparse.Namespace) -> int:
    import os

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ernie_ops.observe import bench

    cfg = config.load(args.config)
    if args.concurrency < 1 or (args.count is not None and args.count < 1) or (args.duration is not None and args.duration <= 0):
        raise UsageError("concurrency, count and duration must be positive")
    prompt, out = args.prompt_tokens, args.max_tokens
    budget = cfg.vllm.max_model_len - 8  # room for special tokens of the template
    if prompt + out > budget:
        out = min(out, budget // 2)
        prompt = budget - out
        err_console.print(
            f"[yellow]note:[/] {args.prompt_tokens} + {args.max_tokens} tokens exceed max_model_len "
            f"{cfg.vllm.max_model_len}: using {prompt} in / {out} out"
        )
    url = args.url or (f"http://127.0.0.1:{args.port}" if args.port else cfg.gateway.url)
    spec = bench.BenchSpec(
        url=url.rstrip("/"), model=cfg.model.served_name, concurrency=args.concurrency,
        duration=None if args.count else (args.duration or 30.0), count=args.count,
        prompt_tokens=prompt, max_tokens=out, api_key=os.environ.get("ERNIE_OPS_API_KEY"), processes=args.processes,
        ca_file=cfg.gateway.ca_file if url.startswith("https:") else None,
    )  # fmt: skip
    if args.json:
        report = bench.run(spec)
        print(json.dumps(report.as_dict(), indent=2))
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task(f"bench {url}: c={spec.concurrency}")
            report = bench.run(
                spec, on_progress=lambda ok, bad: bar.update(task, description=f"bench {url}: c={spec.concurrency} ok={ok} failed={bad}")
            )
        _print_bench(report)
    return EXIT_OK if report.failed == 0 and report.ok > 0 else EXIT_FAILED


def _print_bench(r) -> None:
    from rich.table import Table

    def ms(v):
        return "-" if v is None else f"{v * 1000:.1f} ms"

    t = Table(title="ernie-ops bench", show_header=False)
    rows = [
        ("requests", f"{r.requests} ({r.ok} ok, {r.failed} failed, {r.cut} cut mid-stream, {r.retried} retried before first byte)"),
        ("throughput", f"{r.qps:.1f} req/s, {r.output_tokens_per_s:.0f} output tokens/s over {r.seconds:.1f} s"),
        ("TTFT", f"mean {ms(r.ttft_mean)}, p50 {ms(r.ttft_p50)}, p99 {ms(r.ttft_p99)}"),
        ("end-to-end", f"p50 {ms(r.e2e_p50)}, p99 {ms(r.e2e_p99)}"),
        ("upstreams", ", ".join(f"{k}: {v}" for k, v in sorted(r.upstreams.items())) or "-"),
    ]
    if r.errors:
        rows.append(("errors", ", ".join(f"{k}: {v}" for k, v in r.errors.items())))
    for k, v in rows:
        t.add_row(k, v)
    out_console.print(t)


def cmd_logs(args: argparse.Namespace) -> int:
    import subprocess
    import time

    from ernie_ops.observe import logview

    cfg = config.load(args.config)
    sel = logview.select(cfg, args.sources)
    if args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    since = logview.parse_since(args.since, time.time()) if args.since else None

    def run_journal(argv: list[str]) -> list[str]:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            raise ErnieOpsError("journalctl not found: the instances and the chat app log to the systemd journal") from None
        if r.returncode != 0 and not r.stdout:
            err_console.print(f"[yellow]warning:[/] journalctl: {escape(r.stderr.strip() or f'exit {r.returncode}')}")
        return r.stdout.splitlines()

    def emit(e: logview.Entry) -> None:
        print(json.dumps(e.as_dict(), ensure_ascii=False) if args.json else e.line(), flush=True)

    def warn(text: str) -> None:
        err_console.print(f"[yellow]warning:[/] {escape(text)}")

    for e in logview.read(cfg, sel, lines=args.lines, since=since, phases=args.phases, run_journal=run_journal, warn=warn):
        emit(e)
    if args.follow:
        try:
            logview.follow(cfg, sel, phases=args.phases, emit=emit)
        except FileNotFoundError:
            raise ErnieOpsError("journalctl not found: the instances and the chat app log to the systemd journal") from None
    return EXIT_OK


def cmd_top(args: argparse.Namespace) -> int:
    import httpx

    from ernie_ops.observe import top, top_view

    cfg = config.load(args.config)
    if args.window <= 0 or args.interval <= 0 or args.interval > args.window:
        raise UsageError("--window and --interval must be positive, and --interval at most --window")
    if args.json and not args.once:
        raise UsageError("--json prints one frame: use it with --once")
    with httpx.Client(verify=cfg.gateway.tls_verify()) as client:
        frames = top.frames(cfg, args.window, args.interval, client)
        if args.once:
            frame = next(frames)
            if args.json:
                print(json.dumps(frame.as_dict(), indent=2))
            else:
                out_console.print(top_view.render(frame))
            return EXIT_OK
        top_view.live(frames, out_console)
    return EXIT_OK


def cmd_monitoring_render(args: argparse.Namespace) -> int:
    import os

    from ernie_ops.observe import monitoring

    cfg = config.load(args.config)
    files = monitoring.render(
        cfg, args.host, sd_dir=args.sd_dir, rules=tuple(args.rules or ("/etc/prometheus/rules/ernie-ops.rules.yml",)),
        node=args.node or None, blackbox=args.blackbox or None, ismount=os.path.ismount, remote_url=args.remote_url,
        probe_key_file=args.probe_key_file or None,
    )  # fmt: skip
    print(json.dumps(files, indent=2))
    return EXIT_OK


def cmd_gateway_limits(args: argparse.Namespace) -> int:
    from ernie_ops.chat import upload_limits

    chat = config.load(args.config).chat
    print(json.dumps({"chat_upload_mb": upload_limits.nginx_mb(chat), "chat_app_upload_mb": chat.docs.max_file_mb}))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from ernie_ops.observe import status, status_view

    cfg = config.load(args.config)
    st = status.collect(cfg)
    if args.json:
        print(json.dumps(st.as_dict(), indent=2))
        return EXIT_OK if st.ok else EXIT_FAILED
    for part in status_view.render(st):
        out_console.print(part)
    for p in st.problems:
        err_console.print(f"[red]problem:[/] {p}", soft_wrap=True)
    for w in st.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK if st.ok else EXIT_FAILED


def cmd_route(args: argparse.Namespace) -> int:
    from ernie_ops.host import apply

    cfg = config.load(args.config)
    if args.check and not args.init:
        raise UsageError("--check goes with --init")
    r = apply.init_route(cfg, args.initial, check=args.check) if args.init else apply.route(cfg, args.initial)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        how = "initial route of a fresh host" if r.initial else f"from {r.upstream_file}"
        wrote = (" (would write it)" if args.check else f" (wrote {r.upstream_file})") if r.changed else ""
        out_console.print(f"routed: {r.routed_port} ({how}){wrote}; spare: {r.spare_port if r.spare_port is not None else 'none'}")
        for w in r.warnings:
            err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    from ernie_ops.host import apply

    cfg, path = apply.load_for(args.config)
    services = (args.only,) if args.only else ("engine", "chat")
    if not args.json:
        err_console.print(f"apply ({'check only, ' if args.check else ''}mode {args.mode}): reading {', '.join(services)} ...")
    res = apply.apply(
        cfg, path, services, mode=args.mode, check=args.check, start=not args.no_start, initial=args.initial,
        start_timeout=args.start_timeout,
    )  # fmt: skip
    if args.json:
        print(json.dumps(res.as_dict(), indent=2))
    else:
        for a in res.actions:
            if a.error:
                mark, what = "[red]✗[/]", f"{a.action} failed: {a.error}"
            elif a.action in ("none", "pending"):
                mark, what = "[yellow]![/]" if a.action == "pending" else "[green]=[/]", a.reason
            else:
                verb = "would " + a.action if args.check else a.action
                mark, what = "[green]✓[/]", f"{verb}{' -> ' + a.target if a.target and a.target != a.unit else ''}: {a.reason}"
            out_console.print(f"{mark} {a.service:<6} {a.unit}: {escape(what)}", soft_wrap=True)
        for w in res.warnings:
            err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    return EXIT_OK if res.ok else EXIT_FAILED


def cmd_config_check(args: argparse.Namespace) -> int:
    source = config.resolve_path(args.config)
    try:
        cfg = config.load(args.config)
    except ConfigError as exc:
        if args.json:
            problems = [
                {
                    "file": p.file,
                    "line": p.line,
                    "field": p.field,
                    "value": None if p.value is config.MISSING else p.value,
                    "message": p.message,
                }
                for p in exc.problems
            ]
            print(json.dumps({"ok": False, "file": source, "problems": problems}, default=str, indent=2))
            return exc.exit_code
        raise
    if args.json:
        print(json.dumps({"ok": True, "file": source, "config": cfg.model_dump(mode="json")}, indent=2))
    else:
        out_console.print(f"[green]ok[/]: {source}")
        out_console.print(Syntax(config.dump(cfg), "yaml", theme="ansi_dark", background_color="default"))
    return EXIT_OK


def cmd_chat(args: argparse.Namespace) -> int:
    from ernie_ops.chat import server

    cfg = config.load(args.config)
    return server.run(cfg, config.resolve_path(args.config), server.state_dir(args.state_dir), host=args.host, port=args.port)


def cmd_docs(args: argparse.Namespace) -> int:
    from ernie_ops.docs import commands

    cfg = config.load(args.config)
    result = commands.run(cfg.chat.docs, args)
    if args.json:
        print(json.dumps(result.data, indent=2, ensure_ascii=False))
    else:
        for line in result.lines:
            out_console.print(line, soft_wrap=True, markup=False, highlight=False)
        for line in result.errors:
            err_console.print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
    return EXIT_OK if result.ok else EXIT_FAILED


def _read_password() -> str:
    """One line from stdin when it is not a terminal (scripts, Ansible); else asked twice without echo."""
    import getpass

    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise UsageError("the two passwords differ")
    return first


def cmd_chat_user(args: argparse.Namespace) -> int:
    from ernie_ops.chat import users

    path = args.users_file or config.load(args.config).chat.users_file
    if args.user_command == "list":
        for name in sorted(users.load(path)):
            out_console.print(name)
        return EXIT_OK
    if args.user_command == "remove":
        users.remove(path, args.name)
        err_console.print(f"removed {args.name} from {path}")
        return EXIT_OK
    users.check_new(args.name, "x" * users.MIN_PASSWORD)  # a bad name fails before the password is asked
    created = users.add(path, args.name, _read_password())
    err_console.print(f"{'added' if created else 'new password for'} {args.name} in {path}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except ErnieOpsError as exc:
        err_console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
