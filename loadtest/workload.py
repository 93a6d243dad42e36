"""What the load generators send: key naming, values, and the request of each operation.

``rate``, ``fill`` and the locustfile share it, so a GET test reads exactly the keys ``fill`` wrote.

>>> w = Workload("put", keys=10, value_size=3)
>>> w.request(w.key(7)).method, w.request(w.key(7)).params
('PUT', {'id': 'key-00000007'})
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ENTITY_PATH", "OPS", "Op", "Request", "Workload", "key_name"]

ENTITY_PATH = "/v0/entity"
Op = Literal["put", "get", "delete", "mixed"]
OPS: tuple[Op, ...] = ("put", "get", "delete", "mixed")
# The mixed workload: mostly reads, as in a cache-like service; deletes are rare.
_MIXED = (("get", 0.7), ("put", 0.25), ("delete", 0.05))
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
        """Whether an answer counts as an error: anything but the operation's success status, except
        that a GET of a key the mixed workload deleted (404) is a normal answer there."""
        if status == _SUCCESS[self.method]:
            return False
        return not (mixed and self.method == "GET" and status == 404)


@dataclass
class Workload:
    """Requests over keys ``key_name(0) .. key_name(keys - 1)``, drawn uniformly from a seeded generator."""

    op: Op
    keys: int = 10_000
    value_size: int = 100
    ack: int | None = None
    from_: int | None = None
    seed: int = 1
    _rng: random.Random = field(init=False, repr=False)
    _value: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op is one of {', '.join(OPS)}, got {self.op!r}")
        if self.keys < 1 or self.value_size < 0:
            raise ValueError("keys must be positive and value_size not negative")
        self._rng = random.Random(self.seed)
        # One value reused by every PUT: generating bytes per request would load the generator, not the store.
        self._value = random.Random(self.seed).randbytes(self.value_size)

    def key(self, index: int) -> str:
        return key_name(index)

    def random_key(self) -> str:
        return key_name(self._rng.randrange(self.keys))

    def next_request(self) -> Request:
        """The next request of this workload, on a random key."""
        return self.request(self.random_key())

    def request(self, key: str) -> Request:
        op: str = self.op
        if op == "mixed":
            op = self._rng.choices([name for name, _ in _MIXED], [weight for _, weight in _MIXED])[0]
        method = _METHODS[op]
        params = {"id": key}
        if self.ack is not None:
            params["ack"] = str(self.ack)
        if self.from_ is not None:
            params["from"] = str(self.from_)
        return Request(method, params, self._value if method == "PUT" else None)
