"""The pool's self-healing (issue 33, docs/design/replica-pool.md): a replica whose /health stops answering leaves
rotation, and comes back once it answers again.

Why a watch and not nginx alone: a dead replica's port refuses connections and nginx already tries the next replica
(`proxy_next_upstream`), but a hung one (SIGSTOP, a stuck engine) still accepts them: the
kernel completes the handshake, and open-source nginx has no active health checks. So every half second each replica's
/health is asked with a short timeout; FAILS_TO_LEAVE misses in a row mark its `server` line `down` (one write, `nginx
-t`, reload: `Gateway.mark_down`), OKS_TO_RETURN answers in a row (systemd restarted it, READY) clear the mark. The
last replica in rotation never leaves: a pool with none answers nothing, and the alert says it is degraded.

The include is the truth: the watch reads the ports and their marks from it each round, and leaves the include alone
while a cutover holds the state lock (the cutover writes it then). Pure decisions (`Tracker`), host operations passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ernie_ops.errors import ErnieOpsError
from ernie_ops.host.state import LockHeld
from ernie_ops.traffic.gateway import held_of, marks_of

FAILS_TO_LEAVE = 2  # misses in a row: one lost probe (a GC pause) moves nothing
OKS_TO_RETURN = 2
PROBE_TIMEOUT_SECONDS = 1.0
# 2 misses of a 1 s probe, 0.5 s apart: a hung replica is out in ~3 s (the e2e pool test, loaded, measured 4.2 s
# with 1 s apart; the issue asks for 5)
INTERVAL_SECONDS = 0.5


@dataclass(frozen=True)
class Change:
    port: int
    down: bool
    reason: str

    def sentence(self) -> str:
        return f"replica {self.port} {'out of' if self.down else 'back in'} rotation: {self.reason}"


@dataclass
class Tracker:
    """Consecutive probe results per replica, and the decisions they make."""

    fails: dict[int, int] = field(default_factory=dict)
    oks: dict[int, int] = field(default_factory=dict)

    def observe(self, results: dict[int, str | None], down: frozenset[int], held: frozenset[int] = frozenset()) -> list[Change]:
        """`results`: port -> None (healthy) or what failed; `down`: the ports the include marks down now; `held`:
        those an upgrade holds out (a gate it failed): healthy is not enough for them to come back."""
        changes: list[Change] = []
        for port in sorted(results):  # counts first, and returns before leaves: a returning replica lets another go
            if results[port] is None:
                self.fails[port], self.oks[port] = 0, self.oks.get(port, 0) + 1
                if port in down and port not in held and self.oks[port] >= OKS_TO_RETURN:
                    changes.append(Change(port, False, f"/health answered {self.oks[port]} times in a row"))
            else:
                self.oks[port], self.fails[port] = 0, self.fails.get(port, 0) + 1
        in_rotation = (set(results) - down) | {c.port for c in changes}
        for port in sorted(results):
            failed = results[port]
            if failed is not None and port not in down and self.fails[port] >= FAILS_TO_LEAVE and len(in_rotation) > 1:
                changes.append(Change(port, True, f"{failed} ({self.fails[port]} times in a row)"))
                in_rotation.discard(port)
        return changes


@dataclass
class Round:
    changes: list[Change]
    down: frozenset[int] = frozenset()  # the include's `down` ports after the round (read, or as the watch wrote them)
    skipped: str | None = None  # why the include was left alone this round (a cutover holds the lock)


def watch_once(
    tracker: Tracker,
    read_include: Callable[[], str],
    probe: Callable[[int], str | None],
    apply_marks: Callable[[frozenset[int]], None],
) -> Round:
    """One round: read the pool (each port, marked down or not, held or not) from the include, probe every replica, and
    write the marks the probes call for (`apply_marks` raises LockHeld while a cutover owns the include: skipped)."""
    text = read_include()
    marks = marks_of(text)
    down = frozenset(p for p, is_down in marks.items() if is_down)
    changes = tracker.observe({port: probe(port) for port in marks}, down, frozenset(held_of(text)))
    if not changes:
        return Round([], down)
    new_down = (down | {c.port for c in changes if c.down}) - {c.port for c in changes if not c.down}
    try:
        apply_marks(new_down)
    except LockHeld as exc:
        return Round([], down, skipped=str(exc))
    except ErnieOpsError as exc:  # nginx -t or the reload refused it: the gateway put the include back; try next round
        return Round([], down, skipped=f"the include was left as it was: {exc}")
    return Round(changes, new_down)


def run(
    cfg,
    say: Callable[[str], None],
    rounds: int | None = None,
    stopped: Callable[[], bool] = lambda: False,
    changed: Callable[[], str | None] = lambda: None,
) -> None:
    """`ernie-ops pool watch`: rounds every INTERVAL_SECONDS until stopped (`rounds`, `stopped`: a bounded run). Each
    change is a line on stdout (the unit's journal) and a decision in the system log (`ernie-ops logs` shows both);
    `changed` runs at the first round and whenever the include's marks changed, the watch's own or another writer's (an
    upgrade step that left a replica out): the CLI writes the pool's Prometheus marks; a warning it returns is said."""
    import time
    from pathlib import Path

    import httpx

    from ernie_ops.host import state
    from ernie_ops.serving import probe
    from ernie_ops.traffic.canary.rollout import journal
    from ernie_ops.traffic.gateway import Gateway

    gw = Gateway(cfg.gateway, cfg.pool.session_affinity)
    state_dir = Path(cfg.paths.state_dir)
    tracker = Tracker()
    client = httpx.Client()  # one for the watch's life, every round of it: not a client (and TLS context) per probe

    def health(port: int) -> str | None:
        return probe.health_problem(client, probe.base_url(port), PROBE_TIMEOUT_SECONDS)

    def apply(down: frozenset[int]) -> None:
        with state.cutover_lock(state_dir, "pool watch: marking replicas"):
            gw.mark_down(down)

    def mark() -> None:
        if (warning := changed()) is not None:
            say(f"warning: {warning}")

    n, said, written = 0, None, None  # `written`: the down ports the Prometheus marks were last written for
    with client:
        while (rounds is None or n < rounds) and not stopped():
            r = watch_once(tracker, gw.read_upstream, health, apply)
            if r.skipped and r.skipped != said and not r.skipped.startswith("another cutover"):
                say(f"warning: {r.skipped}")  # once per reason, not every round
            said = r.skipped
            for change in r.changes:
                say(change.sentence())
                journal(f"pool: {change.sentence()}")
            # at the first round, then its own changes and the include's changes made by others (an upgrade step
            # that left a replica out), from the marks this round read or wrote: one read of the include a round
            if r.down != written:
                mark()
                written = r.down
            n += 1
            time.sleep(INTERVAL_SECONDS)
