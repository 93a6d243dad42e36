"""What the load generators send: key naming, values, and the request of each operation.

``rate``, ``fill`` and the locustfile share it, so a GET test reads exactly the keys ``fill`` wrote.

>>> w = Workload("put", keys=10, value_size=3)
>>> w.request(w.key(7)).method, w.request(w.key(7)).params
('PUT', {'id': 'key-00000007'})

The ``cas`` op is a read-modify-write in two requests: a GET of the key's value and ETag, then a
conditional PUT of a new value, only over the version read (``If-Match``), or where the key had none,
only if it still has none (``If-None-Match: *``). Its outcome is the PUT's: applied (201), not applied
(412: another write came between), or unknown (504). Its read is a plain one, with the node's default
quorum: a stale read costs a 412, never a lost update.

>>> cas_condition(b'"00ff"'), cas_condition(b"")
({'If-Match': '"00ff"'}, {'If-None-Match': '*'})
>>> CAS_OUTCOMES["412"]
'not_applied'
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CAS_OUTCOMES",
    "CAS_READ_STATUSES",
    "CAS_WRITE",
    "ENTITY_PATH",
    "OPS",
    "Op",
    "Request",
    "Workload",
    "accepted_statuses",
    "cas_condition",
    "key_name",
]

ENTITY_PATH = "/v0/entity"
Op = Literal["put", "get", "delete", "mixed", "cas"]
OPS: tuple[Op, ...] = ("put", "get", "delete", "mixed", "cas")
# A cas op's conditional write, by its answer: what a report calls each (any other answer is an error).
CAS_OUTCOMES = {"201": "applied", "412": "not_applied", "504": "unknown"}  # as kvnode_paxos_rounds_total
CAS_READ_STATUSES = frozenset((200, 404))  # a cas op's read that goes on to its write
CAS_WRITE = "PUT If"  # a cas op's write, as the generators name it beside the methods
# The mixed workload: mostly reads, as in a cache-like service; deletes are rare.
_MIXED_OPS = ("get", "put", "delete")
_MIXED_WEIGHTS = (0.7, 0.25, 0.05)
_METHODS = {"get": "GET", "put": "PUT", "delete": "DELETE"}
_SUCCESS = {"GET": 200, "PUT": 201, "DELETE": 202}


def key_name(index: int) -> str:
    """Zero-padded, so keys sort in byte order as their numbers do (range scans read them in order);
    loadtest.bench's wrk scripts name keys the same way."""
    return f"key-{index:08d}"


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    params: dict[str, str]
    body: bytes | None

    def is_error(self, status: int, mixed: bool) -> bool:
        return status not in accepted_statuses(self.method, mixed)


def cas_condition(etag: bytes) -> dict[str, str]:
    """A cas op's write condition: over the version its read's ``etag`` names (as the node quoted it),
    or, where the read found none (b""), only if the key still has no live value."""
    return {"If-Match": etag.decode()} if etag else {"If-None-Match": "*"}


def accepted_statuses(method: str, mixed: bool) -> frozenset[int]:
    """The answers that are not errors: the operation's success status, and in the mixed workload also
    404 for a GET (of a key the mix deleted); a cas op's write: applied or not (412: a write came
    between, which is what the op is for)."""
    if method == CAS_WRITE:
        return frozenset((201, 412))
    if mixed and method == "GET":
        return frozenset((_SUCCESS[method], 404))
    return frozenset((_SUCCESS[method],))


@dataclass
class Workload:
    """Requests over keys ``key_name(0) .. key_name(keys - 1)``, drawn uniformly from a seeded generator."""

    op: Op
    keys: int = 10_000
    value_size: int = 100
    ack: int | str | None = None  # a number, or a consistency level by name (quorum, local_quorum, ...)
    from_: int | None = None
    seed: int = 1
    path: str = ENTITY_PATH  # loadtest.selfbench points the generator at the hello-world app's "/"
    token: str = field(default="", repr=False)  # sent as Authorization: Bearer TOKEN ("" = none)
    _rng: random.Random = field(init=False, repr=False)
    value: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op is one of {', '.join(OPS)}, got {self.op!r}")
        if self.keys < 1 or self.value_size < 0:
            raise ValueError("keys must be positive and value_size not negative")
        if self.op == "cas" and self.quorum_params():
            raise ValueError(
                "the cas op takes no ack or from: its write's round asks a majority of the owners"
            )
        if isinstance(self.ack, str) and self.from_ is not None:
            raise ValueError(f"from goes without a named ack: ack={self.ack} counts the key's owners itself")
        self._rng = random.Random(self.seed)
        # One value reused by every PUT: generating bytes per request would load the generator, not the store.
        self.value = random.Random(self.seed).randbytes(self.value_size)

    def key(self, index: int) -> str:
        return key_name(index)

    def random_key(self, among: Sequence[str] | None = None) -> str:
        """A key drawn uniformly: of the workload's, or of ``among`` (a part of them)."""
        if among is None:
            return key_name(self._rng.randrange(self.keys))
        return among[self._rng.randrange(len(among))]

    def next_request(self) -> Request:
        """The next request of this workload, on a random key."""
        return self.request(self.random_key())

    def next_method(self) -> str:
        """The HTTP method of the next request: the op's own, or drawn from the mixed workload's mix."""
        if self.op == "mixed":
            return _METHODS[self._rng.choices(_MIXED_OPS, _MIXED_WEIGHTS)[0]]
        return "GET" if self.op == "cas" else _METHODS[self.op]  # a cas op starts with its read

    def headers(self) -> dict[str, str]:
        """The headers every request carries: the client token, if any."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def quorum_params(self) -> dict[str, str]:
        """The ack and from query parameters this workload sets (none: the node's defaults)."""
        given = {"ack": self.ack, "from": self.from_}
        return {name: str(value) for name, value in given.items() if value is not None}

    def request(self, key: str) -> Request:
        method = self.next_method()
        return Request(method, {"id": key, **self.quorum_params()}, self.value if method == "PUT" else None)
