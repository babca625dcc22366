"""`make demo` / `make demo-down`: one sandboxed host provisioned by ansible/site.yml (cpu).

`make demo MODEL=...` picks the model it serves (MODELS): `smollm2` (default), a real instruction-tuned model
so the first chat answers sensibly, or `tiny`, the random ERNIE-architecture model most tests use. The printout
names the model and how to put ERNIE weights in its place (upgrade.yml with the ernie_model role's source).

The host has its own network namespace, joined to this machine by a veth pair: the gateway answers
at http://10.231.0.2/ from here, nothing listens on this machine's own addresses.

The chat gets one user, `demo`, with a password made for this demo: passed to the playbook the way an
operator would (the ernie_chat role's `ernie_chat_users`, a scrypt hash), so only its hash reaches the
inventory and the host, never a playbook log. The password is kept in the state file (0600) so a
second `make demo` prints the login again.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ernie_ops.chat import users
from ernie_ops.chat.scenarios import BUILTIN
from ernie_ops.errors import UsageError
from tests.harness import provision, real_model, sandbox, tiny_model

STATE = Path.home() / ".cache" / "ernie-ops" / "demo.json"
HOST_IF, HOST_IP, GUEST_IP = "ernie-demo0", "10.231.0.1", "10.231.0.2"
CHAT_USER = "demo"
MODEL_CACHE = Path.home() / ".cache" / "ernie-ops" / "models"


@dataclass(frozen=True)
class DemoModel:
    """One model `make demo` can serve: where its weights come from and the playbook variables that differ from
    provision.host_vars() (the tiny model's, which the e2e tests keep)."""

    title: str  # what the printout says it serves
    served_name: str
    seed_dir: Callable[[], Path]  # the cached model directory, built on first use
    seed_inside: str  # where the host sees it (read-only): the `path` model source
    host_vars: dict = field(default_factory=dict)


# SmolLM2 in float32: on this CPU (AVX512-BF16, no AMX) the config's bf16 changed 3 of 6 short greedy answers
# against transformers and decoded slower; float32 matched all 6 (tests/integration/test_real_model.py).
# max_model_len 4096 (the model takes 8192): chat.max_tokens 1024 + margin 32 leave 3040 prompt tokens for the
# system prompt, history and docs passages; float32 KV for 4096 tokens is ~0.4 GB, within cpu_kvcache_space_gib 1.
# The chat's sampling and prompts for this 135M model, measured through its chat API ("What is the capital of
# France?", then "Tell me one famous museum there."): with the built-in General prompt ("You are ERNIE, a helpful
# assistant. Answer in the user's language, briefly and accurately; ..."), in its bilingual form or its English half,
# it answers in French ("L'Alcazabal, la Cité de la France ..."), greedy or at temperature 0.2 with any seed; with
# "You are a helpful assistant." greedy it says "The capital of France is Paris." and then the Louvre, while at 0.2
# two seeds of three still drift into French. Greedy with repetition_penalty 1.05 ended both turns by itself (10 and
# 24 tokens; at the app's defaults, 0.7 and 1024 tokens, the second turn of an earlier try looped to the limit in
# 331 s). 320 tokens bound the worst case to ~20 s. The other scenarios keep the English half of their prompts.
SMOLLM2_GENERAL = "You are a helpful assistant."
ENGLISH_SCENARIOS = [
    {**s, "system_prompt": SMOLLM2_GENERAL if s["name"] == "通用助手 General" else s["system_prompt"].rsplit("\n", 1)[-1]} for s in BUILTIN
]
SMOLLM2_CHAT = {"temperature": 0.0, "max_tokens": 320, "extra_body": {"repetition_penalty": 1.05}, "scenarios": ENGLISH_SCENARIOS}
MODELS = {
    "smollm2": DemoModel(
        title="SmolLM2-135M-Instruct (Apache-2.0, English-first; a stand-in: ERNIE weights cannot be downloaded here)",
        served_name=real_model.SERVED_NAME,
        seed_dir=real_model.cached,
        seed_inside=f"/srv/seed/{real_model.SERVED_NAME}",
        host_vars={
            "ernie_model_root": "/srv/models/demo",
            "ernie_model_source": {"type": "path", "path": f"/srv/seed/{real_model.SERVED_NAME}"},
            "ernie_model_version": real_model.SERVED_NAME,
            "ernie_model_expected_architecture": "LlamaForCausalLM",
            "ernie_ops_served_name": real_model.SERVED_NAME,
            "ernie_ops_vllm": {**provision.host_vars()["ernie_ops_vllm"], "dtype": "float32", "max_model_len": 4096},
            "ernie_ops_chat": SMOLLM2_CHAT,
        },
    ),
    "tiny": DemoModel(
        title="the tiny ERNIE-architecture model (random weights: its text is noise; what most tests serve)",
        served_name=tiny_model.SERVED_NAME,
        seed_dir=lambda: tiny_model.cached(MODEL_CACHE),
        seed_inside=provision.SEED_INSIDE,
    ),
}
DEFAULT_MODEL = "smollm2"


def choose_model(name: str) -> DemoModel:
    """The model for `make demo MODEL=name`; an unknown name is refused in one sentence listing the choices."""
    if name not in MODELS:
        raise UsageError(f"MODEL={name!r} is not a demo model; use one of: {', '.join(MODELS)} (default {DEFAULT_MODEL})")
    return MODELS[name]


def chat_user_vars(name: str, password: str) -> dict:
    """The playbook variables that give the host one chat user: the ernie_chat role's `ernie_chat_users`."""
    users.check_new(name, password)
    return {"ernie_chat_users": {name: users.hash_password(password)}}


def monitoring_vars() -> dict:
    """The demo host runs the ernie_monitoring role too: its Prometheus on the demo address (alerts and graphs from
    this machine), and this machine may read the gateway's /metrics/PORT and /metrics/node."""
    return {
        "ernie_monitoring_enabled": True,
        "ernie_monitoring_prometheus_listen": f"{GUEST_IP}:9090",
        "ernie_nginx_metrics_allow": ["127.0.0.1", "::1", HOST_IP],
    }


def login_line(state: object) -> str:
    if isinstance(state, dict) and "chat_password" in state:
        return f"chat login: {state.get('chat_user', CHAT_USER)} / {state['chat_password']}"
    return "chat login: unknown (no password in the state file: an older `make demo` made this host)"


def read_state(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def save_state(path: Path, state: dict) -> None:
    """The demo's state (it holds the chat password): readable by its owner only, from the first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(json.dumps(state))


def failed_tasks(output: str) -> list[str]:
    """The message of each failed task in a playbook's output (ansible.cfg: the yaml result format), in order:
    its `msg` and, for a command, the last line it wrote to stderr."""
    found: list[str] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if not re.match(r"(fatal|failed): \[[^]]+\].*FAILED! =>", line):
            continue
        block = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and not nxt.startswith(" "):
                break
            block.append(nxt)
        try:
            result = yaml.safe_load(textwrap.dedent("\n".join(block)))
        except yaml.YAMLError:
            result = None
        if not isinstance(result, dict):
            continue
        text = str(result.get("msg") or "").strip()
        stderr = str(result.get("stderr") or "").strip()
        if stderr and stderr.splitlines()[-1] not in text:
            text = f"{text}: {stderr.splitlines()[-1]}" if text else stderr.splitlines()[-1]
        if text and text not in found:
            found.append(text)
    return found


def failure_summary(output: str, enter: str) -> list[str]:
    """What `make demo` prints after a failed site.yml: why (the failed tasks' own words, e.g. the launcher's reason
    for an instance that did not start) and the journal command as the user can paste it: inside the sandbox."""
    out = []
    for text in failed_tasks(output):
        for line in text.splitlines():
            line = re.sub(r"(journalctl -u \S+ -n \d+)", lambda m: f"{enter} {m.group(1)}", line)
            out.append(f"  {line}")
    return ["why:", *out] if out else []


def _link(sb: sandbox.Sandbox) -> None:
    subprocess.run(["ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "eth0", "netns", str(sb.pid)], check=True)
    subprocess.run(["ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF], check=True)
    subprocess.run(["ip", "link", "set", HOST_IF, "up"], check=True)
    sb.run(f"ip addr add {GUEST_IP}/30 dev eth0 && ip link set eth0 up")


def ernie_swap_lines(workdir: Path) -> list[str]:
    """How to serve ERNIE weights on the demo host instead: upgrade.yml with the ernie_model role's source variables
    (defaults/main.yml, argument_specs) stages them beside the served version and moves the engine to them; its
    `ernie-ops apply` is the engine's only, so site.yml with the same file then restarts the chat app (and
    Prometheus's probe) on the new model name. Tried on the demo host with the tiny ERNIE model as the archive."""
    playbook = f"cd ansible && {Path(sys.executable).parent / 'ansible-playbook'} -i {workdir / 'hosts.yml'}"
    return [
        "To serve ERNIE weights instead, write ernie.yml (the ernie_model role's variables) and run upgrade.yml, then site.yml:",
        '  ernie_model_source: {type: archive, path: /abs/path/ERNIE-4.5-0.3B-PT.tar.gz, checksum: "sha256:<hex>", strip_components: 1}',
        "    # or {type: hub, repo: baidu/ERNIE-4.5-0.3B-PT, revision: <40-hex commit>} where the host reaches the hub",
        "  ernie_model_version: ernie-4.5-0.3b-pt",
        "  ernie_model_expected_architecture: Ernie4_5ForCausalLM",
        "  ernie_ops_served_name: ernie-4.5-0.3b-pt",
        f"  {playbook} upgrade.yml -e @/abs/path/ernie.yml   # the engine moves to the new weights",
        f"  {playbook} site.yml -e @/abs/path/ernie.yml      # the chat app and the monitoring take the new model name",
        "  (pass the same -e @ernie.yml to any later site.yml run, or it puts the demo model back)",
    ]


def served_text(model: DemoModel, state: dict, seconds: float, workdir: Path, enter: str) -> str:
    """What `make demo` prints once site.yml succeeded: the model it serves, the addresses, what to try."""
    name = model.served_name
    swap = "\n".join(ernie_swap_lines(workdir))
    return f"""
site.yml took {seconds:.0f} s. The host serves {model.title} as model "{name}":
  gateway   http://{GUEST_IP}/v1/   (OpenAI API, model "{name}")
  health    http://{GUEST_IP}/health
  chat      http://{GUEST_IP}/      (Chainlit)
  {login_line(state)}
  metrics   http://{GUEST_IP}/metrics/8000   http://{GUEST_IP}/metrics/node   (allowed for this machine)
  alerts    http://{GUEST_IP}:9090/alerts    (Prometheus with the project's rules; Grafana: grafana/ in the repo)
Try:
  curl -s http://{GUEST_IP}/health
  curl -sN http://{GUEST_IP}/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{{"model":"{name}","stream":true,"max_tokens":40,"messages":[{{"role":"user","content":"Hello, please introduce yourself."}}]}}'
  {enter} ernie-ops status
  {enter} ernie-ops cutover 8001
  {enter} ernie-ops bench -d 20 -c 8
  {enter} ernie-ops top
  {enter} ernie-ops logs -n 20
  {enter} journalctl -u ernie-vllm@8000 -n 20
{swap}
Remove it: make demo-down"""


def up(model_name: str = DEFAULT_MODEL) -> int:
    try:
        model = choose_model(model_name)
    except UsageError as exc:
        print(exc)
        return 2
    if STATE.exists():
        print(f"a demo host is already up ({STATE}): chat http://{GUEST_IP}/, {login_line(read_state(STATE))}")
        print("`make demo-down` removes it")
        return 0  # the README's "a second `make demo` prints it again": not a failure
    reason = sandbox.why_unavailable()
    if reason:
        print(f"cannot run the demo: {reason}")
        return 2
    fleet = provision.Fleet(["demo"], model.seed_dir(), seed_inside=model.seed_inside)
    fleet.vars.update(model.host_vars)
    sb = fleet.hosts["demo"]
    password = secrets.token_urlsafe(12)
    state = {"base": str(sb.base), "pid": sb.pid, "workdir": str(fleet.workdir), "chat_user": CHAT_USER, "chat_password": password,
             "model": model_name}  # fmt: skip
    save_state(STATE, state)
    _link(sb)
    print(f"sandboxed host up (systemd PID {sb.pid}); running ansible-playbook site.yml into it (~5 min) ...", flush=True)
    run = fleet.playbook("site.yml", **chat_user_vars(CHAT_USER, password), **monitoring_vars())
    print("\n".join(run.output.splitlines()[-6:]))
    enter = f"nsenter -t {sb.pid} -m -p -u -i -n --"
    if run.rc != 0:
        print(run.output[-6000:])
        print(f"site.yml failed (rc {run.rc}); log in {fleet.workdir}. `make demo-down` removes the host.")
        if summary := failure_summary(run.output, enter):
            print("\n".join(summary))
        return 1
    print(served_text(model, state, run.seconds, fleet.workdir, enter))
    return 0


def down() -> int:
    if not STATE.exists():
        print("no demo host is up")
        return 0
    st = json.loads(STATE.read_text())
    sb = sandbox.Sandbox(base=Path(st["base"]), pid=int(st["pid"]))
    sb.systemctl("stop", "ernie-vllm.target", "ernie-chainlit.service", "nginx.service", check=False, timeout=180)
    sb.down()
    subprocess.run(["ip", "link", "del", HOST_IF], check=False, capture_output=True)  # gone with the namespace already
    subprocess.run(["rm", "-rf", "--one-file-system", st["workdir"]], check=False)
    STATE.unlink()
    print("demo host removed")
    return 0


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.harness.demo")
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"one of: {', '.join(MODELS)}")
    args = ap.parse_args(argv)
    return up(args.model) if args.action == "up" else down()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
