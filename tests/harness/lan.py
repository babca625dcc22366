"""A private Ethernet segment between sandboxes, so test hosts reach each other as real hosts do (a central
Prometheus scraping another host's gateway, an edge gateway in front of inference hosts).

A bridge lives in a network namespace created for it (`ip netns add`, named after this process); each host gets
one veth pair, its end named eth0 inside the sandbox's own network namespace, with an address of SUBNET. Nothing
in the machine's own network namespace is created or changed; `down()` deletes the bridge's namespace, which
removes the bridge and every veth pair with it.
"""

from __future__ import annotations

import os
import subprocess

from tests.harness import sandbox

SUBNET = "10.213.0"  # /24, addresses .1, .2, ... in the order hosts attach


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class Lan:
    """Always call `down()`."""

    def __init__(self, name: str):
        self.netns = f"ernie-lan-{name}-{os.getpid()}"
        self.addresses: dict[str, str] = {}
        _ip("netns", "add", self.netns)
        try:
            _ip("-n", self.netns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.netns, "link", "set", "br0", "up")
        except BaseException:
            self.down()
            raise

    def attach(self, host: str, sb: sandbox.Sandbox) -> str:
        """Plug the sandbox in: eth0 inside it, up, with the next address; returns that address."""
        address = f"{SUBNET}.{len(self.addresses) + 1}"
        port = f"p{len(self.addresses) + 1}"
        _ip("-n", self.netns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(sb.pid))
        _ip("-n", self.netns, "link", "set", port, "master", "br0", "up")
        sb.run(f"ip addr add {address}/24 dev eth0 && ip link set eth0 up")
        self.addresses[host] = address
        return address

    def down(self) -> None:
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30, check=False)
