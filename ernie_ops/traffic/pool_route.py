"""Which port serves in each slot of a pool (`pool.replicas` > 1, docs/design/replica-pool.md).

The pool's counterpart of `apply.route`'s routed port and spare: read from the upstream include (the truth, as for
one instance), the slot's first port where the include names none of the slot's ports (a fresh host, or a slot the
pool grew by). Pure: the include's text in, ports out.
"""

from __future__ import annotations

from ernie_ops.config import Config
from ernie_ops.traffic.gateway import GatewayError, marks_of


def replicas(cfg: Config, text: str, source: str) -> list[int]:
    """The port serving in each slot, slot order. A port the include names that the config does not list is a usage
    error naming the configured ports; two ports of one slot at once (an interrupted replica upgrade) is refused."""
    named = list(marks_of(text))  # in rotation or marked `down` by the pool watch: a slot's replica either way
    for port in named:
        cfg.instance(port)
    out = []
    for slot in cfg.slots():
        inside = [p for p in slot.ports if p in named]
        if len(inside) > 1:
            raise GatewayError(
                f"{source} routes {' and '.join(map(str, inside))} of slot {slot.index} ({slot.device()}) at once: a replica's "
                "replacement was interrupted, or the file was edited by hand; `ernie-ops status` shows which of them serves"
            )
        out.append(inside[0] if inside else slot.ports[0])
    return out


def missing(cfg: Config, text: str, source: str) -> list[int]:
    """The replicas the include does not route yet (all of them on a fresh host)."""
    named = set(marks_of(text))
    return [p for p in replicas(cfg, text, source) if p not in named]
