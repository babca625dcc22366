"""Static checks of systemd/ernie-chainlit.service: the fixed interface and its hardening score."""

from __future__ import annotations

from pathlib import Path

from tests.harness.unit_files import directives, exposure

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "ernie-chainlit.service"
MAX_EXPOSURE = 2.5


def test_exposure_is_at_most_2_5():
    score = exposure(UNIT)
    print(f"\nsystemd-analyze security --offline=true {UNIT.name}: {score}")
    assert score <= MAX_EXPOSURE


def test_interface_the_ansible_role_relies_on():
    d = directives(UNIT)
    # The chat venv, not /opt/ernie-ops/venv: chainlit 2.12 (mcp<2) and vLLM 0.32 (mcp>=2) cannot share one.
    assert d["ExecStart"] == ["/opt/ernie-ops/chat-venv/bin/python -m ernie_ops chat"]
    assert d["User"] == ["ernie"] and d["Group"] == ["ernie"]
    assert d["EnvironmentFile"] == ["/etc/ernie-ops/chat.env"]  # required: no leading "-"
    assert d["Environment"][0] == "ERNIE_OPS_CONFIG=/etc/ernie-ops/ernie.yaml"
    assert d["StateDirectory"] == ["ernie-ops-chat"] and d["WorkingDirectory"] == ["%S/ernie-ops-chat"]
    assert d["Type"] == ["notify"] and d["Restart"] == ["on-failure"] and d["RestartPreventExitStatus"] == ["2"]
    assert d["IPAddressAllow"] == ["localhost"] and d["IPAddressDeny"] == ["any"]


def test_nginx_points_at_the_default_port():
    from ernie_ops import config

    upstream = (UNIT.parents[1] / "nginx" / "ernie-ops" / "chat-upstream.conf").read_text()
    assert f"server 127.0.0.1:{config.Config().chat.port};" in upstream


SOCKET = UNIT.with_suffix(".socket")


def test_systemd_holds_the_port_so_a_restart_of_the_app_never_closes_it():
    """The service takes its port from ernie-chainlit.socket (the app serves on the passed fd, ernie_ops/chat_app/server.py):
    `systemctl restart ernie-chainlit.service` leaves the socket listening, and nginx's requests wait in its backlog."""
    from ernie_ops import config

    chat = config.Config().chat
    s = directives(SOCKET)
    assert s["ListenStream"] == [f"{chat.host}:{chat.port}"]  # the config's default; the role's drop-in writes the host's
    assert int(s["Backlog"][0]) >= 512
    assert s["Service"] == [UNIT.name]
    d = directives(UNIT)
    assert d["Sockets"] == [SOCKET.name] and d["Requires"] == [SOCKET.name]
    assert SOCKET.name in d["After"][0].split()
