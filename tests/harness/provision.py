"""Sandboxed hosts provisioned by the real playbooks (ansible/site.yml, upgrade.yml).

Connection: Ansible's `community.docker.nsenter` plugin (bundled with the `ansible` package) runs every
module inside the sandbox's namespaces (mount, pid, net, uts, ipc) given the PID of its systemd;
no sshd, no keys, nothing listening. The hosts get:
  /srv/wheelhouse   (ro) the wheels `make test` collected (~/.cache/ernie-ops/wheelhouse): pip installs
                    offline, the way an air-gapped site would (ernie_vllm_pip_extra_args)
  /srv/seed/<name>  (ro) the tiny ERNIE model, a `path` model source
and no units (site.yml installs them). Upper layers live on disk (the venvs are ~3.5 GB).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.harness import budget, sandbox
from tests.harness.lan import Lan
from tests.harness.paths import ARTIFACTS

PROJECT = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = PROJECT / "ansible"
WHEELHOUSE = Path(os.environ.get("ERNIE_OPS_WHEELHOUSE", Path.home() / ".cache" / "ernie-ops" / "wheelhouse"))
SEED_INSIDE = "/srv/seed/ernie-tiny"
EMPTY_UNITS = Path("/var/tmp/ernie-ops-no-units")
# every playbook run's output (profile_tasks timings included) outlives the fleet, for a failed CI run
LOGS = ARTIFACTS / "ansible"


def host_vars(model_version: str = "tiny-v1") -> dict:
    """The cpu profile on the tiny model: what `make demo` and the e2e tests provision."""
    return {
        "ansible_connection": "community.docker.nsenter",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_become": False,  # nsenter already runs as root inside; the hosts have no sudo
        "ernie_preflight_accelerator": "cpu",
        "ernie_model_min_free_gb": 1,
        "ernie_vllm_pip_extra_args": "--no-index --find-links /srv/wheelhouse",
        "ernie_model_root": "/srv/models/ernie-tiny",
        "ernie_model_source": {"type": "path", "path": SEED_INSIDE},
        "ernie_model_version": model_version,
        "ernie_model_expected_architecture": "Ernie4_5ForCausalLM",
        "ernie_ops_served_name": "ernie-tiny",
        "ernie_ops_vllm": {
            "max_model_len": 2048,
            "enforce_eager": True,
            "cpu_kvcache_space_gib": 1,
            "shutdown_drain_seconds": 30,
            "stop_grace_seconds": 10,
        },
        "ernie_ops_health": {"smoke_timeout_seconds": 10.0},
        "ernie_ops_journald_system_max_use": "200M",
        # a lab: the hosts' gateways take /v1/ without keys on their lan (ernie_nginx refuses that elsewhere; here every run warns)
        "ernie_nginx_lab": True,
    }


@dataclass
class Run:
    rc: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP per host: ok, changed, failed, ..."""
        out: dict[str, dict[str, int]] = {}
        for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", self.output, re.M):
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        return out

    def failures(self, host: str) -> list[tuple[str, str]]:
        """(task, message) of each of `host`'s failed tasks, in order (the operator's transcript): the header above each
        `fatal: [host]: FAILED! =>` line and the `msg` of the result below it (callback_result_format = yaml)."""
        lines, task, out = self.output.splitlines(), "", []
        for n, line in enumerate(lines):
            if line.startswith(("TASK [", "RUNNING HANDLER [")):
                task = line.split("[", 1)[1].rsplit("]", 1)[0]
            elif line.startswith(f"fatal: [{host}]: FAILED!"):
                body = itertools.takewhile(lambda s: s.startswith("    ") or not s.strip(), lines[n + 1 :])
                result = yaml.safe_load(textwrap.dedent("\n".join(body))) or {}
                out.append((task, str(result.get("msg", "")) if isinstance(result, dict) else str(result)))
        return out

    def failed_task(self, host: str) -> tuple[str, str]:
        """(task, message) where `host` failed first; ("", "") when it failed nowhere."""
        return next(iter(self.failures(host)), ("", ""))

    def changed_tasks(self) -> list[str]:
        """Names of the tasks that reported a change (for a useful failure message)."""
        names, current = [], ""
        for line in self.output.splitlines():
            if line.startswith(("TASK [", "RUNNING HANDLER [")):
                current = line.split("[", 1)[1].rsplit("]", 1)[0]
            elif line.startswith("changed:"):
                names.append(current)
        return names


class Fleet:
    """Sandboxed hosts in one inventory; always call `down()`."""

    def __init__(
        self,
        names: list[str],
        model_dir: Path,
        extra_ro: dict[str, str] | None = None,
        lan: bool = False,
        groups: dict[str, str] | None = None,
        member_of: dict[str, list[str]] | None = None,
        seed_inside: str = SEED_INSIDE,
    ):
        """`model_dir` is bound read-only at `seed_inside` in each host (a `path` model source for host_vars()'s
        SEED_INSIDE, or for a caller's own `ernie_model_source` when it names another model).
        `lan`: the hosts share a private segment (tests/harness/lan.py); each one's address is its ansible_host.
        `groups`: a host's inventory group other than ernie_inference (e.g. {"gw": "ernie_edge"});
        `member_of`: more groups a host is in besides that one (e.g. {"gw": ["ernie_db"]})."""
        EMPTY_UNITS.mkdir(exist_ok=True)
        if not WHEELHOUSE.is_dir():
            raise RuntimeError(f"no wheelhouse at {WHEELHOUSE}: run `make wheelhouse` (part of `make test`)")
        self.hosts: dict[str, sandbox.Sandbox] = {}
        self.vars: dict[str, object] = {}  # inventory variables of every run (a test's overrides win)
        self.host_vars: dict[str, dict[str, object]] = {name: {} for name in names}  # one host's, of every run
        self.lan: Lan | None = None
        self.groups = {name: (groups or {}).get(name, "ernie_inference") for name in names}
        self.member_of = member_of or {}
        self.workdir = Path(f"/var/tmp/ernie-ops-ansible-{os.getpid()}-{'-'.join(names)}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        binds = {str(WHEELHOUSE): "/srv/wheelhouse", str(model_dir): seed_inside, **(extra_ro or {})}
        try:
            for name in names:
                sb = sandbox.up(name, share=PROJECT, units=EMPTY_UNITS, binds_ro=binds, net=True, upper_on_disk=True)
                self.hosts[name] = sb
                sb.run("ip link set lo up")
            if lan:
                self.lan = Lan("-".join(names))
                for name, sb in self.hosts.items():
                    self.host_vars[name]["ansible_host"] = self.lan.attach(name, sb)
        except BaseException:
            self.down()
            raise

    @property
    def inference(self) -> dict[str, sandbox.Sandbox]:
        """The hosts of the ernie_inference group (each serving the model), in order."""
        return {name: sb for name, sb in self.hosts.items() if self.groups[name] == "ernie_inference"}

    def inventory(self, aliases: dict[str, dict] | None = None, **overrides: object) -> Path:
        """The inventory of a run; with `aliases` ({inventory name: its variables}) every name is this fleet's one host,
        each with its own variables: one run tries several variable sets at once (checks that change nothing)."""
        groups: dict[str, dict] = {}
        for i, (name, sb) in enumerate(self.hosts.items()):
            # all hosts share this machine's cores: each host's routed instance gets a different one,
            # so parallel starts do not queue on core 0 (measured: 129 s vs ~60 s for two hosts)
            first, second = str(i % 2), str((i + 1) % 2)
            instances = [{"port": 8000, "cpu_cores": first}, {"port": 8001, "cpu_cores": second}]
            hosts = groups.setdefault(self.groups[name], {"hosts": {}})["hosts"]
            hosts[name] = {**host_vars(), "ernie_ops_instances": instances, "ansible_nsenter_pid": sb.pid, **self.vars,
                           **self.host_vars[name], **overrides}  # fmt: skip
        for name, extra in self.member_of.items():
            for group in extra:
                groups.setdefault(group, {"hosts": {}})["hosts"][name] = {}  # its variables are in its first group
        if aliases is not None:
            ((group, members),) = groups.items()
            ((_, entry),) = members["hosts"].items()  # aliases stand for a one-host fleet
            groups = {group: {"hosts": {alias: {**entry, **extra} for alias, extra in aliases.items()}}}
        path = self.workdir / "hosts.yml"
        path.write_text(yaml.safe_dump(groups, sort_keys=False))
        return path

    def playbook(
        self, playbook: str, *args: str, timeout: float = 1800, aliases: dict[str, dict] | None = None, **overrides: object
    ) -> Run:
        """ansible-playbook from the repository's ansible/ (its ansible.cfg), output kept for the test; `aliases`: see
        `inventory`."""
        env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
                   ANSIBLE_LOCAL_TEMP=str(self.workdir / "tmp"), ANSIBLE_HOME=str(self.workdir / "home"),
                   ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
                   # facts kept between the runs of one fleet (`gathering = smart` then skips the setup module): the
                   # roles read only facts a run cannot change (distribution, architecture, vCPUs, service manager);
                   # gathering them cost 3.5-4.5 s of every one of the fleet's ~20 runs
                   ANSIBLE_CACHE_PLUGIN="ansible.builtin.jsonfile", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(self.workdir / "facts"),
                   ANSIBLE_CACHE_PLUGIN_TIMEOUT="86400")  # fmt: skip
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(self.inventory(aliases, **overrides)), playbook, *args]
        budget.count("playbooks")
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True, timeout=timeout)
        run = Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"{time.strftime('%Y%m%d-%H%M%S')}-{'-'.join(self.hosts)}-{playbook}.log").write_text(run.output)
        for stale in sorted(LOGS.glob("*.log"))[:-50]:  # keep the newest 50
            stale.unlink(missing_ok=True)
        return run

    def down(self) -> None:
        """Remove every host, all at once: `systemctl poweroff` in each (down.sh), and its PID 1 killed with the
        whole PID namespace when the drains outlast 15 s (stopping each unit first cost 44-54 s per fleet)."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(self.hosts))) as pool:
            futures = [pool.submit(sb.down) for sb in self.hosts.values()]
        errors = [f.exception() for f in futures if f.exception() is not None]
        self.hosts.clear()
        if self.lan is not None:
            self.lan.down()
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.workdir)], check=False)
        if errors:
            raise errors[0]
