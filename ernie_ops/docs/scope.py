"""What a search may see (`Scope`), and how the index's two kinds of rows name it: the SQL over documents, and the
scope keys the dense vectors are stored under (a shared collection `s:NAME`, a chat's uploads `p:[owner, chat]`)."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """What a search may see: shared documents (owner NULL) in `collections` (None = every collection),
    plus the private documents of exactly `owner` and `conversation` (none when owner is None)."""

    collections: list[str] | None = None
    owner: str | None = None
    conversation: str | None = None


def vector_key(collection: str, owner: str | None, conversation: str | None) -> str:
    """The scope key a document's vectors are stored under."""
    return f"s:{collection}" if owner is None else "p:" + json.dumps([owner, conversation], ensure_ascii=False)


def vector_keys(scope: Scope, shared: list[str]) -> list[str]:
    """The vector scope keys a search may match (`shared`: the collections that exist, for collections=None)."""
    keys = [vector_key(c, None, None) for c in (shared if scope.collections is None else scope.collections)]
    if scope.owner is not None:
        keys.append(vector_key("", scope.owner, scope.conversation))
    return keys


def where(scope: Scope) -> tuple[str, list]:
    """The WHERE fragment (over documents aliased d) for a scope, and its parameters."""
    parts, params = [], []
    if scope.collections is None:
        parts.append("d.owner IS NULL")
    elif scope.collections:
        parts.append(f"(d.owner IS NULL AND d.collection IN ({','.join('?' * len(scope.collections))}))")
        params += list(scope.collections)
    if scope.owner is not None:
        parts.append("(d.owner = ? AND d.conversation IS ?)")
        params += [scope.owner, scope.conversation]
    return ("(" + " OR ".join(parts) + ")" if parts else "0"), params
