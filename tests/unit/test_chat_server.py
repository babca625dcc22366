"""`ernie-ops chat` refuses clearly before Chainlit starts, and generates Chainlit's config from ours.

This venv has no Chainlit (it lives in the chat venv: its mcp pin clashes with vLLM's), which makes
the "not installed" path real here; tests/ui runs the app itself.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib

import pytest

from ernie_ops import cli, config
from ernie_ops.chat import users
from ernie_ops.chat_app import server
from ernie_ops.errors import ConfigError, ErnieOpsError, UsageError

SECRET = "s" * 48
# What Chainlit 2.12's custom-element renderer can import (docs.chainlit.io/api-reference/elements/custom).
ALLOWED_IMPORTS = {"react", "sonner", "lucide-react"} | {
    f"@/components/ui/{n}" for n in ("button", "card", "input", "textarea", "label", "badge", "progress", "separator")
}


@pytest.fixture
def cfg(tmp_path):
    users.add(str(tmp_path / "users.yaml"), "alice", "pass-word-1")
    return config.parse(f"chat:\n  users_file: {tmp_path / 'users.yaml'}\n  app_name: 'Say \"hi\"'\n")


def with_chainlit(monkeypatch):
    """Pretend Chainlit is importable, to reach the checks after that one."""
    real = server.importlib.util.find_spec
    monkeypatch.setattr(server.importlib.util, "find_spec", lambda name: object() if name == "chainlit" else real(name))


def test_without_chainlit_it_says_which_venv(cfg):
    with pytest.raises(UsageError, match=r"chainlit is not installed .* /opt/ernie-ops/chat-venv"):
        server.preflight(cfg, {"CHAINLIT_AUTH_SECRET": SECRET})


def test_secret_missing_or_short(cfg, monkeypatch):
    with_chainlit(monkeypatch)
    with pytest.raises(UsageError, match=r"CHAINLIT_AUTH_SECRET is not set: the unit reads it from /etc/ernie-ops/chat.env"):
        server.preflight(cfg, {})
    with pytest.raises(UsageError, match="has 10 characters; use at least 32"):
        server.preflight(cfg, {"CHAINLIT_AUTH_SECRET": "x" * 10})
    server.preflight(cfg, {"CHAINLIT_AUTH_SECRET": SECRET})


def test_users_file_missing_or_broken_refuses_and_empty_warns(cfg, tmp_path, monkeypatch, caplog):
    with_chainlit(monkeypatch)
    env = {"CHAINLIT_AUTH_SECRET": SECRET}
    path = tmp_path / "other.yaml"
    other = config.parse(f"chat:\n  users_file: {path}\n")
    with pytest.raises(ConfigError, match="not found; add a user"):
        server.preflight(other, env)
    path.write_text("users:\n  alice: plain\n")
    with pytest.raises(ConfigError, match=r"users\.alice = .plain."):
        server.preflight(other, env)
    path.write_text("users: {}\n")  # what provisioning writes before an operator adds someone
    server.preflight(other, env)
    assert "has no users yet: nobody can log in until `ernie-ops chat-user add NAME`" in caplog.text


def test_chainlit_config_is_generated_from_ours(cfg, tmp_path):
    server.prepare(cfg, tmp_path / "state")
    toml = tomllib.loads((tmp_path / "state" / ".chainlit" / "config.toml").read_text())
    assert toml["UI"]["name"] == 'Say "hi"'
    assert toml["project"]["session_timeout"] == 3600
    upload = toml["features"]["spontaneous_file_upload"]
    # on because the built-in Docs scenario reads uploads (the other profiles hide the clip: app.py's override);
    # Chainlit's own limits lie above chat.docs's so the app's sentence, not Chainlit's refusal, names the limit
    assert upload["enabled"] is True and upload["max_size_mb"] > cfg.chat.docs.max_file_mb
    assert upload["max_files"] >= 100 > cfg.chat.docs.max_files_per_message
    no_docs = config.parse("chat:\n  scenarios:\n    - {name: Only, system_prompt: hi}\n")
    server.prepare(no_docs, tmp_path / "plain")
    plain = tomllib.loads((tmp_path / "plain" / ".chainlit" / "config.toml").read_text())
    assert plain["features"]["spontaneous_file_upload"]["enabled"] is False  # nothing would read a file
    assert toml["features"]["edit_message"] is False and toml["features"]["unsafe_allow_html"] is False
    assert toml["meta"]["generated_by"] == server.CHAINLIT_VERSION
    assert "客服 Support" in (tmp_path / "state" / "chainlit.md").read_text()
    assert (tmp_path / "state" / ".files").is_dir()


def test_custom_elements_are_laid_out_fresh_at_every_start(cfg, tmp_path):
    root = tmp_path / "state"
    elements = root / "public" / "elements"
    elements.mkdir(parents=True)
    (elements / "Stale.jsx").write_text("export default function Stale() { return null }")  # a file an old release left
    (elements / "CopyForm.jsx").write_text("old")
    server.prepare(cfg, root)
    shipped = sorted(p.name for p in server.ELEMENTS_DIR.glob("*.jsx"))
    assert shipped == ["BatchProgress.jsx", "CopyForm.jsx", "CopyPost.jsx", "OnboardingItem.jsx"]
    assert sorted(p.name for p in elements.iterdir()) == shipped
    assert (elements / "CopyForm.jsx").read_text() == (server.ELEMENTS_DIR / "CopyForm.jsx").read_text()
    for name in shipped:  # Chainlit's renderer: one default export, props and APIs as globals, allowed imports only
        text = (elements / name).read_text()
        assert text.count("export default function") == 1, name
        imports = re.findall(r'^import .* from "([^"]+)"', text, re.M)
        assert set(imports) <= ALLOWED_IMPORTS, (name, imports)


def test_uploads_are_on_for_a_copy_scenario_alone(tmp_path):
    only_copy = config.parse("chat:\n  scenarios:\n    - {name: Copy, system_prompt: hi, tool: copy}\n")
    server.prepare(only_copy, tmp_path / "s")
    toml = tomllib.loads((tmp_path / "s" / ".chainlit" / "config.toml").read_text())
    assert toml["features"]["spontaneous_file_upload"]["enabled"] is True  # product lists are uploaded there


def test_state_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/ernie-ops-chat:/var/lib/other")
    assert str(server.state_dir(None)) == "/var/lib/ernie-ops-chat"
    assert server.state_dir(str(tmp_path)) == tmp_path
    monkeypatch.delenv("STATE_DIRECTORY")
    assert str(server.state_dir(None)).endswith(".local/state/ernie-ops-chat")


def test_port_in_use_is_detected():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not server.port_free("127.0.0.1", s.getsockname()[1])  # (ernie_ops.host.ports.port_free, used by the app)


def test_cli_chat_exits_2_with_one_sentence(cfg, tmp_path, capsys, monkeypatch):
    path = tmp_path / "ernie.yaml"
    path.write_text(f"chat:\n  users_file: {tmp_path / 'users.yaml'}\n")
    monkeypatch.setenv("CHAINLIT_AUTH_SECRET", SECRET)
    assert cli.main(["--config", str(path), "chat", "--state-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "chainlit is not installed" in err and "ernie-ops[chat]" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()  # refused before touching anything


def test_unwritable_state_dir_is_one_sentence(cfg, tmp_path, monkeypatch):
    with_chainlit(monkeypatch)
    monkeypatch.setenv("CHAINLIT_AUTH_SECRET", SECRET)
    (tmp_path / "a-file").write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ErnieOpsError, match=r"cannot write the chat state dir .*a-file/state"):
        server.run(cfg, "ernie.yaml", tmp_path / "a-file" / "state", port=port)


@pytest.mark.parametrize(
    ("env", "fds"),
    [
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "1"}, [3]),
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "2"}, [3, 4]),
        ({"LISTEN_PID": "4243", "LISTEN_FDS": "1"}, []),  # meant for another process (the one that started us)
        ({"LISTEN_FDS": "1"}, []),  # no LISTEN_PID: sd_listen_fds(3) ignores it too
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "x"}, []),
        ({"LISTEN_PID": "4242", "LISTEN_FDS": "-1"}, []),
        ({}, []),  # run by hand
    ],
)
def test_listen_fds_follows_sd_listen_fds(env, fds):
    assert server.listen_fds(env, 4242) == fds


def test_without_systemds_socket_nothing_is_inherited_and_the_variables_go(monkeypatch):
    """LISTEN_* of another process are removed, so that nothing this one starts takes them for its own."""
    monkeypatch.setenv("LISTEN_PID", "1")
    monkeypatch.setenv("LISTEN_FDS", "1")
    assert server.inherited_socket() is None
    assert "LISTEN_PID" not in os.environ and "LISTEN_FDS" not in os.environ


def test_ready_waits_for_an_http_answer_not_for_a_connect():
    """A socket that accepts connections but answers nothing (systemd's, before the app serves) is not READY."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        ready = server.threading.Event()
        server._notify_when_listening(f"http://127.0.0.1:{s.getsockname()[1]}", ready, timeout=3)
    assert not ready.is_set()


def test_answers_is_true_for_any_http_status_and_false_for_a_silent_socket():
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        assert server._answers(f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
        httpd.server_close()
    with socket.socket() as s:  # listens (a backlog) but never accepts: what systemd's socket is while the app loads
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not server._answers(f"http://127.0.0.1:{s.getsockname()[1]}")
