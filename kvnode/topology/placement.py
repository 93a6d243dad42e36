"""Replica placement: which nodes hold a key, in which order, by rendezvous (highest-random-weight) hashing.

Every node scores every key with a keyed hash; the key's replicas are the nodes by descending score. The
order depends only on the key and the nodes' tokens (by default their URLs; kvnode.topology.membership keeps
each member's, so a node that replaces another takes its place), so every process agrees on it; ``from = k``
takes the first k, so a smaller ``from`` is a prefix of a larger one. Adding a node moves only the keys
it now scores highest on, about 1/(n+1) of them.

A key's *owners* are the first N of its order, N the cluster's replication factor (kvnode.topology.membership
keeps it): with N below the member count, each member owns about N/members of the keys, and a node
joining takes about N/(members+1) of them, one owner's share of each key it now owns.

Host-aware: a machine may run several nodes (one per core), and a key's replicas belong on distinct
machines whenever there are enough. The order takes each host's best-scored node first, by score, then
the rest by score, so the first ``hosts`` replicas of every key are on distinct hosts. A node's host is
the host part of its token (the URL it first joined with), so a replacement keeps its predecessor's
place on any machine. With one node per host, or all on one host, this is plain rendezvous order.

Scoring is a few per cent of a request's CPU (docs/benchmarks.md measures it), so a Placement keeps the
orders of recent keys (at most ``_CACHED_KEYS`` keys of at most ``_CACHED_KEY_BYTES`` bytes, forgotten all
at once when full: a hot key is scored again at once). A placement never changes, so a cached order is never
stale: a new membership is a new Placement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["Placement", "host_of", "replicas_for"]

_CACHED_KEYS = 16_384
_CACHED_KEY_BYTES = 128  # longer keys are scored every time: the cache stays under a few MB


def host_of(url: str) -> str:
    """The machine a node runs on, from its URL (or token): its host part. Loopback addresses such as
    127.0.0.1 and 127.0.0.2 are distinct hosts, so one machine can model several.

    >>> host_of("http://127.0.0.2:8081")
    '127.0.0.2'
    """
    return urlsplit(url).hostname or url


class Placement:
    """The replica order of keys over a fixed list of node URLs, scored by their tokens.

    >>> nodes = Placement(["http://a:1", "http://b:2", "http://c:3"])
    >>> nodes.replicas_for(b"user:42", 2) == nodes.replicas_for(b"user:42", 3)[:2]
    True
    """

    def __init__(self, nodes: Sequence[str], tokens: Sequence[str] = (), replication: int = 0) -> None:
        """``tokens``: what each node is scored by, in the order of ``nodes``; by default its URL.
        ``replication``: the owners of a key, N (0, or more than the nodes: every node)."""
        if not nodes:
            raise ValueError("a placement needs at least one node")
        if len(set(nodes)) != len(nodes):
            raise ValueError("node URLs must be distinct")
        tokens = tuple(tokens) or tuple(nodes)
        if len(tokens) != len(nodes) or len(set(tokens)) != len(tokens):
            raise ValueError("every node needs a token of its own")
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.tokens: tuple[str, ...] = tokens
        if replication < 0:
            raise ValueError(f"a replication factor is at least 1, got {replication}")
        # The owners of every key: N, or every node while the cluster has fewer members than N.
        self.replication = min(replication, len(nodes)) if replication else len(nodes)
        # Each node's token keys its hash (blake2b keys are at most 64 bytes, so it is digested first);
        # scoring copies a pre-keyed hasher, which costs a third of keying a new one per key.
        self._hashers = [
            hashlib.blake2b(digest_size=8, key=hashlib.blake2b(token.encode()).digest()[:32])
            for token in tokens
        ]
        hosts = [host_of(token) for token in tokens]
        self.hosts = len(set(hosts))
        # The host of each node, only where hosts are shared unevenly enough to change the plain order.
        self._host_of: dict[str, str] | None = (
            dict(zip(self.nodes, hosts, strict=True)) if 1 < self.hosts < len(self.nodes) else None
        )
        self._orders: dict[bytes, list[str]] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def order(self, key: bytes) -> list[str]:
        """All nodes, most preferred replica first: each host's best first (highest score; equal scores by
        URL), then the others by score.

        >>> machines = Placement(["http://10.0.0.1:81", "http://10.0.0.1:82", "http://10.0.0.2:81"])
        >>> len({host_of(url) for url in machines.replicas_for(b"user:42", 2)})
        2
        """
        scored = []
        for hasher, url in zip(self._hashers, self.nodes, strict=True):
            score = hasher.copy()
            score.update(key)
            scored.append((score.digest(), url))
        scored.sort(reverse=True)
        hosts = self._host_of
        if hosts is None:
            return [url for _, url in scored]
        first: list[str] = []
        rest: list[str] = []
        seen: set[str] = set()
        for _, url in scored:
            host = hosts[url]
            if host in seen:
                rest.append(url)
            else:
                seen.add(host)
                first.append(url)
        return first + rest

    def replicas_for(self, key: bytes, n: int) -> list[str]:
        if not 1 <= n <= len(self.nodes):
            raise ValueError(f"n must be between 1 and {len(self.nodes)}, got {n}")
        order = self._orders.get(key)
        if order is None:
            order = self.order(key)
            if len(key) <= _CACHED_KEY_BYTES:
                if len(self._orders) >= _CACHED_KEYS:
                    self._orders.clear()
                self._orders[key] = order
        return order[:n]

    def owners(self, key: bytes, copies: int = 0) -> list[str]:
        """The nodes that hold a version written to ``copies`` replicas (a record's count, 0: the
        replication factor's N), most preferred first.

        >>> machines = [f"http://127.0.0.{host}:{port}" for host in (1, 2, 3) for port in (81, 82)]
        >>> six = Placement(machines, replication=3)
        >>> owners = six.owners(b"user:42")
        >>> len(owners), len({host_of(url) for url in owners}), six.owners(b"user:42", copies=2) == owners[:2]
        (3, 3, True)
        """
        return self.replicas_for(key, min(copies, self.replication) if copies else self.replication)

    @property
    def everyone_owns(self) -> bool:
        """Whether every node owns every key (N is the member count, or more)."""
        return self.replication == len(self.nodes)


def replicas_for(key: bytes, nodes: Sequence[str], n: int) -> list[str]:
    """One-off form of :meth:`Placement.replicas_for`; a node keeps a :class:`Placement` instead."""
    return Placement(nodes).replicas_for(key, n)
