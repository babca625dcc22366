"""The pool watch's decisions (traffic/pool_watch.py) and its one edit of the include (gateway.with_marks)."""

from __future__ import annotations

from ernie_ops.host.state import LockHeld
from ernie_ops.traffic import gateway
from ernie_ops.traffic.pool_watch import Change, Tracker, watch_once

HUNG = "/health timed out (1.0 s)"


def test_a_replica_leaves_after_two_misses_in_a_row_and_returns_after_two_answers():
    t = Tracker()
    assert t.observe({8000: None, 8002: HUNG}, frozenset()) == []  # one miss (a GC pause) moves nothing
    assert t.observe({8000: None, 8002: None}, frozenset()) == []  # and an answer resets the count
    assert t.observe({8000: None, 8002: HUNG}, frozenset()) == []
    [out] = t.observe({8000: None, 8002: HUNG}, frozenset())
    assert out == Change(8002, True, f"{HUNG} (2 times in a row)")
    assert out.sentence() == f"replica 8002 out of rotation: {HUNG} (2 times in a row)"
    assert t.observe({8000: None, 8002: None}, frozenset({8002})) == []
    [back] = t.observe({8000: None, 8002: None}, frozenset({8002}))
    assert back.sentence() == "replica 8002 back in rotation: /health answered 2 times in a row"


def test_the_last_replica_in_rotation_never_leaves_and_one_coming_back_lets_the_others_go():
    refused = "connection refused"
    t = Tracker()
    for _ in range(2):
        changes = t.observe({8000: refused, 8002: refused}, frozenset())
    assert changes == [Change(8000, True, f"{refused} (2 times in a row)")]  # 8002 stays: a pool with none answers nothing
    assert t.observe({8000: refused, 8002: refused}, frozenset({8000})) == []
    t = Tracker()
    for _ in range(2):
        changes = t.observe({8000: refused, 8002: refused, 8004: None}, frozenset({8004}))
    assert [(c.port, c.down) for c in changes] == [(8004, False), (8000, True), (8002, True)]


def test_a_round_writes_the_marks_the_probes_call_for_and_skips_while_a_cutover_holds_the_include():
    include = gateway.render_pool([8000, 8002])
    writes: list[frozenset[int]] = []
    health = {8000: None, 8002: HUNG}

    def apply(down: frozenset[int]) -> None:
        nonlocal include
        writes.append(down)
        include = gateway.with_marks(include, down)

    t = Tracker()
    for _ in range(2):
        r = watch_once(t, lambda: include, health.get, apply)
    assert [c.port for c in r.changes] == [8002] and writes == [frozenset({8002})]
    assert "server 127.0.0.1:8002 max_fails=1 fail_timeout=5s down;" in include and gateway.parse_ports(include) == [8000]

    def held(down: frozenset[int]) -> None:
        raise LockHeld("another cutover is running (pid 7, cutover to 8001)")

    health[8002] = None
    watch_once(t, lambda: include, health.get, held)
    r = watch_once(t, lambda: include, health.get, held)
    assert r.changes == [] and "another cutover is running" in r.skipped
    r = watch_once(t, lambda: include, health.get, apply)  # the lock is free again: it comes back now
    assert [c.sentence() for c in r.changes] == ["replica 8002 back in rotation: /health answered 3 times in a row"]
    assert gateway.parse_ports(include) == [8000, 8002] and "down" not in include


def test_marks_change_only_the_down_flag_of_each_server_line():
    split = gateway.render_split(8000, 8001, 25)
    marked = gateway.with_marks(split, frozenset({8001}))
    assert marked.replace(" down;", ";") == split and gateway.marks_of(marked) == {8000: False, 8001: True}
    assert gateway.with_marks(marked, frozenset()) == split


def test_a_write_nginx_refuses_is_said_and_tried_again_next_round_not_the_end_of_the_watch():
    """Under systemd the watch's `nginx -t` once could not bind port 80 (the unit lacked CAP_NET_BIND_SERVICE): each
    write raised, the watch exited and restarted in a loop and the hung replica stayed in rotation. A refused write is
    a skipped round with nginx's reason (the gateway put the include back); the next round tries again."""
    include = gateway.render_pool([8000, 8002])
    health = {8000: None, 8002: HUNG}
    refusing = True

    def apply(down: frozenset[int]) -> None:
        nonlocal include
        if refusing:
            raise gateway.GatewayError("nginx -t failed: nginx: [emerg] bind() to 127.0.0.1:80 failed (13: Permission denied)")
        include = gateway.with_marks(include, down)

    t = Tracker()
    watch_once(t, lambda: include, health.get, apply)
    r = watch_once(t, lambda: include, health.get, apply)
    assert r.changes == [] and r.skipped.startswith("the include was left as it was: nginx -t failed") and "down" not in include
    refusing = False
    r = watch_once(t, lambda: include, health.get, apply)
    assert [c.port for c in r.changes] == [8002] and gateway.marks_of(include) == {8000: False, 8002: True}


def test_the_watch_rewrites_the_pools_marks_when_another_writer_took_a_replica_out(tmp_path):
    """An upgrade step that fails leaves its replica marked down and stopped: the watch makes no change of its own
    (dead and already out), yet the Prometheus marks must say 1 of 2 or ErniePoolDegraded never fires. Two real
    listeners answer /health on 127.0.0.1; the second stops when the include is rewritten under the watch."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ernie_ops import config
    from ernie_ops.traffic import pool_watch

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Health) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    a, b = (s.server_address[1] for s in servers)
    include = tmp_path / "upstream.conf"
    include.write_text(gateway.render_pool([a, b]))
    cfg = config.Config(
        pool={"replicas": 2}, instances=[{"port": a, "slot": 0}, {"port": b, "slot": 1}],
        gateway={"upstream_file": str(include)}, paths={"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")},
    )  # fmt: skip
    written: list[dict[int, bool]] = []
    said: list[str] = []
    n = 0

    def stopped() -> bool:
        nonlocal n
        n += 1
        if n == 3:  # the upgrade's step: b out of rotation, then stopped
            include.write_text(gateway.render_pool([a, b], down=frozenset({b})))
            servers[1].shutdown()
            servers[1].server_close()
        return n > 6

    try:
        pool_watch.run(cfg, said.append, stopped=stopped, changed=lambda: written.append(gateway.marks_of(include.read_text())))
    finally:
        servers[0].shutdown()
        servers[0].server_close()
    assert written == [{a: False, b: False}, {a: False, b: True}], written  # at the start, and once when b went out
    assert said == [], said  # no change of its own: b is dead and already out


def test_a_replica_an_upgrade_holds_out_never_comes_back_however_well_it_answers():
    include = gateway.render_pool([8000, 8002], held={8002: "8002 failed the SLO gate: ttft p90 0.4 s\nover 0.06 s"})
    assert "server 127.0.0.1:8002 max_fails=1 fail_timeout=5s down; # held: 8002 failed the SLO gate: ttft p90 0.4 s\n" in include
    assert gateway.held_of(include) == {8002: "8002 failed the SLO gate: ttft p90 0.4 s"} and gateway.in_rotation(include) == [8000]
    writes: list[frozenset[int]] = []

    def apply(down: frozenset[int]) -> None:
        nonlocal include
        writes.append(down)
        include = gateway.with_marks(include, down)

    t = Tracker()
    for _ in range(4):  # healthy, round after round
        r = watch_once(t, lambda: include, {8000: None, 8002: None}.get, apply)
    assert r.changes == [] and writes == [] and r.down == frozenset({8002})
    # the watch's one edit never clears a hold, even when asked to (another replica leaving, say)
    assert gateway.held_of(gateway.with_marks(include, frozenset())) == {8002: "8002 failed the SLO gate: ttft p90 0.4 s"}
    assert gateway.in_rotation(gateway.with_marks(include, frozenset())) == [8000]
    assert gateway.held_of(gateway.render_keyed(include)) == gateway.held_of(include)  # the keyed twin holds it out too
