"""The ernie_postgres role's pg_hba.conf, rendered from its template with Jinja (the filters it uses are Jinja's own):
each chat host is exactly one address. An IPv6 client given /32 (as it was) let in every host of a /32 network,
2^96 addresses: the test asks, for each rendered network, how many addresses it admits."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "ernie_postgres" / "templates"


def render(clients: list[str], hostvars: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("pg_hba.conf.j2").render(
        ansible_managed="managed", ernie_postgres_database="ernie_chat", ernie_postgres_user="ernie_chat",
        ernie_postgres_clients=clients, hostvars=hostvars,
    )  # fmt: skip


def test_each_chat_host_is_one_address_ipv4_or_ipv6_and_a_given_network_stays_as_written():
    text = render(["ans-a", "fd00:abcd::5", "10.0.0.7", "10.1.0.0/24"], {"ans-a": {"ansible_host": "2001:db8::2"}})
    networks = [
        line.split()[3] for line in text.splitlines() if line.startswith(("host ", "hostssl ")) and "ernie_chat  ernie_chat" in line
    ]
    admitted = {n: ipaddress.ip_network(n, strict=False).num_addresses for n in networks}
    assert admitted == {"127.0.0.1/32": 1, "2001:db8::2/128": 1, "fd00:abcd::5/128": 1, "10.0.0.7/32": 1, "10.1.0.0/24": 256}, admitted


def test_over_the_network_only_with_tls_and_the_server_has_it_on():
    """issue 34: a chat host's password and conversations never cross the network in clear. Every rule for a remote
    client is `hostssl` (a connection without TLS matches no rule: refused; the fleet's e2e test tries one); only
    loopback, for the role's own checks, is plain `host`; the server's settings turn TLS on with the role's files."""
    text = render(["ans-a", "10.0.0.7"], {"ans-a": {"ansible_host": "10.0.0.5"}})
    rules = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    remote = [r for r in rules if r[0] != "local" and not r[3].startswith("127.0.0.1/")]
    assert [r[0] for r in remote] == ["hostssl", "hostssl"] and [r[3] for r in remote] == ["10.0.0.5/32", "10.0.0.7/32"], rules
    assert {r[0] for r in rules if r[0] != "local" and r[3].startswith("127.0.0.1/")} == {"host"}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    conf = env.get_template("chat-history.conf.j2").render(
        ansible_managed="managed", ernie_postgres_listen=["10.0.0.9"], ernie_postgres_port=5432, ernie_postgres_max_connections=100,
        ernie_postgres_tls_dir="/etc/postgresql/15/main/ernie-tls",
    )  # fmt: skip
    assert "ssl = on" in conf and "ssl_key_file = '/etc/postgresql/15/main/ernie-tls/server.key'" in conf
    assert "ssl_min_protocol_version = 'TLSv1.2'" in conf
