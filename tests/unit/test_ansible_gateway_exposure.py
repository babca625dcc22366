"""The ernie_nginx role refuses a gateway other machines can reach without API keys and an HTTPS edge (issue 34,
item 7), unless the inventory says it is a lab, and then every run warns. Run for real by ansible-playbook on this
machine: one run, one local inventory host per case (tests/harness/role_tasks.py)."""

from __future__ import annotations

from tests.harness import role_tasks

KEY = "k" * 32


def test_a_gateway_open_to_other_machines_is_refused_unless_keys_and_an_edge_protect_it_or_it_is_a_lab(tmp_path):
    hosts = {
        "open": {},  # the defaults: every address, no keys, no edge
        "keys_only": {"ernie_nginx_api_keys": [KEY], "ernie_nginx_listen_address": "10.0.0.5"},
        "loopback": {"ernie_nginx_listen_address": "127.0.0.1"},  # behind this host's own edge: nobody else reaches it
        "keys_and_edge": {"ernie_nginx_api_keys": [KEY], "ernie_edge_enabled": True},
        "lab": {"ernie_nginx_lab": True},
    }
    run = role_tasks.run(tmp_path, "ernie_nginx", ["preflight"], hosts)
    failed = role_tasks.failures(run)
    assert sorted(failed) == ["keys_only", "open"], run.output[-4000:]
    assert failed["open"].startswith("The gateway would listen on every address port 80, where other machines reach it, and ")
    assert "/v1/ takes requests without an API key (ernie_nginx_api_keys is empty); and no HTTPS edge is in front" in failed["open"]
    assert "or, for a lab where this is wanted, set ernie_nginx_lab: true" in failed["open"]
    assert failed["open"].endswith("Nothing was changed.")
    assert "listen on 10.0.0.5 port 80" in failed["keys_only"] and "API key" not in failed["keys_only"]
    assert "no HTTPS edge is in front of it" in failed["keys_only"]
    warned = [line for line in run.output.splitlines() if "WARNING (ernie_nginx_lab)" in line]
    assert len(warned) == 1 and "every address port 80 is reachable from other machines and /v1/ takes requests" in warned[0], warned


def test_edge_hosts_in_the_inventory_are_the_tls_in_front_and_keys_are_still_required(tmp_path):
    hosts = {"keyed": {"ernie_nginx_api_keys": [KEY]}, "open": {}, "edge": {"ernie_nginx_listen_address": "127.0.0.1"}}
    run = role_tasks.run(tmp_path, "ernie_nginx", ["preflight"], hosts, groups={"ernie_edge": ["edge"]})
    failed = role_tasks.failures(run)
    assert sorted(failed) == ["open"], run.output[-4000:]
    assert "without an API key" in failed["open"] and "no HTTPS edge" not in failed["open"]
