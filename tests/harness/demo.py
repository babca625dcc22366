"""`make demo` / `make demo-down`: one sandboxed host provisioned by ansible/site.yml (cpu, tiny model).

The host has its own network namespace, joined to this machine by a veth pair: the gateway answers
at http://10.231.0.2/ from here, nothing listens on this machine's own addresses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness import provision, sandbox, tiny_model

STATE = Path.home() / ".cache" / "ernie-ops" / "demo.json"
HOST_IF, HOST_IP, GUEST_IP = "ernie-demo0", "10.231.0.1", "10.231.0.2"


def _link(sb: sandbox.Sandbox) -> None:
    subprocess.run(["ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "eth0", "netns", str(sb.pid)], check=True)
    subprocess.run(["ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF], check=True)
    subprocess.run(["ip", "link", "set", HOST_IF, "up"], check=True)
    sb.run(f"ip addr add {GUEST_IP}/30 dev eth0 && ip link set eth0 up")


def up() -> int:
    if STATE.exists():
        print(f"a demo host is already up ({STATE}); `make demo-down` first")
        return 1
    reason = sandbox.why_unavailable()
    if reason:
        print(f"cannot run the demo: {reason}")
        return 2
    model = tiny_model.cached(Path.home() / ".cache" / "ernie-ops" / "models")
    fleet = provision.Fleet(["demo"], model)
    sb = fleet.hosts["demo"]
    STATE.write_text(json.dumps({"base": str(sb.base), "pid": sb.pid, "workdir": str(fleet.workdir)}))
    _link(sb)
    print(f"sandboxed host up (systemd PID {sb.pid}); running ansible-playbook site.yml into it (~4 min) ...", flush=True)
    run = fleet.playbook("site.yml")
    print("\n".join(run.output.splitlines()[-6:]))
    if run.rc != 0:
        print(run.output[-6000:])
        print(f"site.yml failed (rc {run.rc}); log in {fleet.workdir}. `make demo-down` removes the host.")
        return 1
    enter = f"nsenter -t {sb.pid} -m -p -u -i -n --"
    print(f"""
site.yml took {run.seconds:.0f} s. The host serves:
  gateway   http://{GUEST_IP}/v1/   (OpenAI API, model "ernie-tiny")
  health    http://{GUEST_IP}/health
  chat      http://{GUEST_IP}/      (Chainlit)
Try:
  curl -s http://{GUEST_IP}/health
  curl -sN http://{GUEST_IP}/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{{"model":"ernie-tiny","stream":true,"max_tokens":20,"messages":[{{"role":"user","content":"Hello"}}]}}'
  {enter} ernie-ops status
  {enter} ernie-ops cutover 8001
  {enter} ernie-ops bench -d 20 -c 8
  {enter} journalctl -u ernie-vllm@8000 -n 20
Remove it: make demo-down""")
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


if __name__ == "__main__":
    sys.exit({"up": up, "down": down}[sys.argv[1]]())
