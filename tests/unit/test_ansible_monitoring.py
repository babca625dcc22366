"""The ernie_monitoring role's preflight for a central Prometheus (ernie_monitoring_scrape_hosts), run for real by
ansible-playbook on this machine: one inventory host per mistake in one run, each refused with its own sentence,
the good ones passing. The role on serving hosts (a central Prometheus scraping another through its gateway) is
tests/e2e/test_ansible.py's."""

from __future__ import annotations

from tests.harness import role_tasks


def test_scrape_hosts_must_be_other_inventory_hosts_serving_the_same_model(tmp_path):
    served = {"ernie_ops_served_name": "ernie-4.5"}
    hosts = {
        "central": {**served, "ernie_monitoring_scrape_hosts": ["gpu-b"]},
        "gpu-b": served,
        "gpu-other": {"ernie_ops_served_name": "qwen-7b"},
        "typo": {**served, "ernie_monitoring_scrape_hosts": ["gpu-bb"]},
        "itself": {**served, "ernie_monitoring_scrape_hosts": ["itself"]},
        "mixed": {**served, "ernie_monitoring_scrape_hosts": ["gpu-other"]},
        "off": {**served, "ernie_monitoring_enabled": False, "ernie_monitoring_scrape_hosts": ["gpu-bb"]},  # not checked when off
    }
    for name in hosts:
        hosts[name].setdefault("ernie_monitoring_enabled", True)
    run = role_tasks.run(tmp_path, "ernie_monitoring", ["preflight"], hosts)
    failed = role_tasks.failures(run)
    assert failed == {
        "typo": "ernie_monitoring_scrape_hosts of typo: gpu-bb is not in the inventory; list other inventory hosts. Nothing was changed.",
        "itself": "ernie_monitoring_scrape_hosts of itself: itself is this host itself (its own instances are scraped already); "
        "list other inventory hosts. Nothing was changed.",
        "mixed": "ernie_monitoring_scrape_hosts of mixed: gpu-other serves 'qwen-7b', this host 'ernie-4.5', and this Prometheus "
        "probes completions of 'ernie-4.5' only: scrape it from a host serving the same model. Nothing was changed.",
    }, run.output[-4000:]
    assert all(run.recap()[h]["failed"] == 0 for h in ("central", "gpu-b", "gpu-other", "off")), run.recap()
