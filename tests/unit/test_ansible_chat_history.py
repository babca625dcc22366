"""The ernie_chat role's login secret and history database inputs, run for real by ansible-playbook on this
machine (connection local, chat.env under tmp_path): several chat hosts must share one login secret, the
database URL goes into chat.env (never ernie.yaml) and a line added by hand is kept. The role's own tasks
files (`include_role: tasks_from`); the database itself on sandboxed hosts is tests/e2e/test_ansible.py's.
"""

from __future__ import annotations

from tests.harness import role_tasks
from tests.harness.chat_role import env_file as _env
from tests.harness.chat_role import needs_root, playbook

SECRET = "SeCrEt-" + "s" * 40  # a marker that must never be printed
URL = "postgresql://ernie_chat:PaSsWoRd-0123456789@10.0.0.5:5432/ernie_chat"


def test_several_chat_hosts_without_one_login_secret_are_refused_before_anything_changes(tmp_path):
    run = playbook(tmp_path, ["preflight"], {"a": {}, "b": {}}, groups={"ernie_inference": ["a", "b"]})
    failed = role_tasks.failures(run)
    sentence = (
        "the chat runs on 2 hosts (a, b) and each would sign logins with its own secret, so a user the edge moves to another "
        "host is logged out: set ernie_chat_auth_secret in the vault (python3 -c 'import secrets; print(secrets.token_urlsafe(48))')."
    )
    assert failed == {"a": sentence, "b": sentence}, run.output[-4000:]
    assert not (tmp_path / "chat.env").exists()


def test_one_chat_host_or_a_shared_secret_passes_and_a_bad_secret_or_url_is_named(tmp_path):
    hosts = {
        "a": {"ernie_chat_auth_secret": SECRET},
        "b": {"ernie_chat_auth_secret": SECRET, "ernie_chat_database_url": URL},
        "off": {"ernie_chat_enabled": False},  # not a chat host: not counted, not checked
        "short": {"ernie_chat_auth_secret": "SeCrEt-short"},
        "quote": {"ernie_chat_auth_secret": SECRET + "'"},
        "url_newline": {"ernie_chat_auth_secret": SECRET, "ernie_chat_database_url": URL + "\n"},
        "url_mysql": {"ernie_chat_auth_secret": SECRET, "ernie_chat_database_url": "mysql://u:p@h/db"},
    }
    groups = {"ernie_inference": list(hosts)}
    run = playbook(tmp_path, ["preflight"], hosts, ("-vv",), groups=groups)
    failed = role_tasks.failures(run)
    secret_bad = "ernie_chat_auth_secret must be at least 32 printable ASCII characters without spaces, quotes or backslashes."
    url_bad = (
        "ernie_chat_database_url must be one line postgresql://USER:PASSWORD@HOST:PORT/DATABASE (no spaces or line breaks; "
        "a vaulted string typed with Enter adds one)."
    )
    assert failed == {"short": secret_bad, "quote": secret_bad, "url_newline": url_bad, "url_mysql": url_bad}, run.output[-4000:]
    assert "SeCrEt" not in run.output and "PaSsWoRd" not in run.output


@needs_root
def test_chat_env_takes_the_shared_secret_and_the_database_url_and_keeps_a_hand_made_url(tmp_path):
    first = playbook(tmp_path, ["preflight", "env"])  # one host, no secret given: its own, kept
    assert first.rc == 0, first.output[-4000:]
    own = _env(tmp_path)[0]["CHAINLIT_AUTH_SECRET"]
    shared = playbook(tmp_path, ["preflight", "env"], ernie_chat_auth_secret=SECRET, ernie_chat_database_url=URL)
    assert shared.rc == 0 and shared.recap()["h"]["changed"] == 1, shared.output[-4000:]
    assert _env(tmp_path) == ({"CHAINLIT_AUTH_SECRET": SECRET, "ERNIE_OPS_CHAT_DATABASE_URL": URL}, 0o600) and own != SECRET
    again = playbook(tmp_path, ["preflight", "env"], ernie_chat_auth_secret=SECRET, ernie_chat_database_url=URL)
    assert again.rc == 0 and again.recap()["h"]["changed"] == 0, again.changed_tasks()
    # no URL given: the line chat.env has (written by hand, under the name chat.history.database_url_env gives) stays
    renamed = {"ernie_ops_chat": {"history": {"database_url_env": "CHAT_DB"}}}
    path = tmp_path / "chat.env"
    path.write_text(path.read_text().replace("ERNIE_OPS_CHAT_DATABASE_URL=", "CHAT_DB="))
    kept = playbook(tmp_path, ["preflight", "env"], ernie_chat_auth_secret=SECRET, **renamed)
    assert kept.rc == 0 and kept.recap()["h"]["changed"] == 0, kept.changed_tasks()
    assert _env(tmp_path)[0] == {"CHAINLIT_AUTH_SECRET": SECRET, "CHAT_DB": URL}


def test_the_chat_unit_may_reach_its_history_database_by_a_drop_in_and_a_host_name_is_refused(tmp_path):
    """The unit allows localhost only (IPAddressDeny=any): a database URL with an address adds that address in
    ernie-chainlit.service.d/network.conf (with ernie_chat_allow_addresses); no URL, no drop-in (an old one is
    removed); a URL naming its server by host name without ernie_chat_allow_addresses is refused with a sentence."""
    dropin = tmp_path / "ernie-chainlit.service.d"
    common = {"ernie_chat_auth_secret": SECRET, "ernie_chat_dropin_dir": str(dropin)}
    run = playbook(tmp_path, ["preflight", "network"], ernie_chat_database_url=URL, ernie_chat_allow_addresses=["10.0.9.0/24"], **common)
    assert run.rc == 0 and run.recap()["h"]["changed"] == 2, run.output[-4000:]  # the directory, the file
    lines = [line for line in (dropin / "network.conf").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["[Service]", "IPAddressAllow=10.0.0.5 10.0.9.0/24"]
    again = playbook(tmp_path, ["preflight", "network"], ernie_chat_database_url=URL, ernie_chat_allow_addresses=["10.0.9.0/24"], **common)
    assert again.rc == 0 and again.recap()["h"]["changed"] == 0, again.changed_tasks()
    none = playbook(tmp_path, ["preflight", "network"], **common)
    assert none.rc == 0 and not (dropin / "network.conf").exists(), none.output[-4000:]
    named = playbook(tmp_path, ["preflight"], ernie_chat_database_url=URL.replace("10.0.0.5", "db.example.com"), **common)
    assert role_tasks.failures(named) == {
        "h": "ernie_chat_database_url names its server 'db.example.com' by host name, and the chat unit connects only to the "
        "addresses it allows (IPAddressAllow): list the server's address in ernie_chat_allow_addresses, or give the URL with the address."
    }, named.output[-4000:]
    assert "PaSsWoRd" not in run.output + named.output


def test_the_chat_ports_socket_listens_where_ernie_yaml_says(tmp_path):
    """systemd holds the chat port (ernie-chainlit.socket): its address comes from chat.host:chat.port (ernie_ops_chat)
    in a drop-in, so ernie.yaml stays the one place that says it; an IPv6 host gets brackets; a second run changes nothing."""
    common = {"ernie_chat_auth_secret": SECRET, "ernie_chat_unit_dir": str(tmp_path)}
    run = playbook(tmp_path, ["preflight", "socket"], ernie_ops_chat={"host": "::1", "port": 8600}, **common)
    assert run.rc == 0 and run.recap()["h"]["changed"] == 3, run.output[-4000:]  # the unit, the directory, the drop-in
    assert (tmp_path / "ernie-chainlit.socket").read_bytes() == (role_tasks.PROJECT / "systemd" / "ernie-chainlit.socket").read_bytes()
    dropin = tmp_path / "ernie-chainlit.socket.d" / "listen.conf"
    assert [line for line in dropin.read_text().splitlines() if not line.startswith("#")] == [
        "[Socket]", "ListenStream=", "ListenStream=[::1]:8600",
    ]  # fmt: skip
    again = playbook(tmp_path, ["preflight", "socket"], ernie_ops_chat={"host": "::1", "port": 8600}, **common)
    assert again.rc == 0 and again.recap()["h"]["changed"] == 0, again.changed_tasks()
    default = playbook(tmp_path, ["preflight", "socket"], **common)
    assert default.rc == 0 and "ListenStream=127.0.0.1:8500" in dropin.read_text(), default.output[-4000:]
