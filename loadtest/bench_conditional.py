"""``make bench``'s conditional-write rows (docs/conditional-writes.md): on the cluster of the bench's first
PUT row, every request sent to its first node, so that node coordinates them all and its CPU and its
replica calls to the other two are the figures of a coordinator.

- PUT: plain writes with the node's defaults (ack=2, from=3) of random filled keys, by one client;
- conditional PUT, uncontended: one client's chain of conditional writes of a key of its own, each over
  the version its last answer named (``If-Match``), so every one applies;
- the same chain by 8 clients on 8 keys, and by 8 clients on one key, where they contend: a client whose
  write was refused goes on from the version the 412 named, without reading.

Each client is a wrk process of one connection (loadtest.wrk's scripts). For each row: writes and applied
writes per second, p50 and p99 (against the PUT row's p50: the goal is at most 4x), the first node's CPU
per request, and the replica round trips per write: its calls to each peer (``kvnode_replica_calls_total``,
op ``write`` for a PUT, ``paxos`` for a conditional write) per request, so an uncontended conditional write
shows its phases (prepare, propose, commit: 3), a contended one its retries too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.replica_calls import replica_calls
from loadtest.wrk import Measured, conditional_lua_script, format_latency, lua_script, run_wrk

__all__ = ["CONTENDING_CLIENTS", "P50_GOAL", "ConditionalRow", "measure_conditional", "render_conditional"]

CONTENDING_CLIENTS = 8
P50_GOAL = 4.0  # an uncontended conditional write's p50 at most this many times a plain PUT's
_ENTITY = "/v0/entity"


@dataclass(frozen=True, slots=True)
class ConditionalRow:
    """One row: what its clients sent, how many there were, what wrk measured, and the first node's
    replica calls to its ``peers`` during the row (None: not exposed)."""

    name: str
    conditional: bool
    clients: int
    measured: Measured
    replica_calls: int | None
    peers: int

    @property
    def applied_per_sec(self) -> float:
        """Writes that took effect per second: a PUT's every answer without error, a conditional write's
        201s."""
        result = self.measured.result
        if not result.requests:
            return 0.0
        applied = result.outcomes.get("applied", 0) if self.conditional else result.requests - result.errors
        return result.requests_per_sec * applied / result.requests

    @property
    def coordinator_cpu(self) -> float | None:
        """The first node's CPU seconds per request."""
        requests = self.measured.result.requests
        return self.measured.server_cpu[0] / requests if requests else None

    @property
    def round_trips(self) -> float | None:
        """The first node's replica calls per request and peer: the round trips a write made."""
        requests = self.measured.result.requests
        if self.replica_calls is None or not requests or not self.peers:
            return None
        return self.replica_calls / requests / self.peers


def measure_conditional(
    wrk: str,
    urls: Sequence[str],
    server_pids: Sequence[int],
    keys: int,
    value_size: int,
    duration: int,
    scratch: Path,
    token: str = "",
) -> list[ConditionalRow]:
    """The rows the module names, on the cluster at ``urls`` (filled with ``keys`` keys), one after the
    other, each for ``duration`` seconds."""
    first, peers = urls[0], list(urls[1:])
    clients = CONTENDING_CLIENTS
    plans = [
        ("PUT, default quorum, random filled keys", [lua_script("PUT", _ENTITY, keys, value_size, 1, token)]),
        ("conditional PUT, uncontended (If-Match on its last write)", _chains(["alone"], value_size, token)),
        (
            f"conditional PUT, {clients} clients on {clients} keys",
            _chains([f"own-{i}" for i in range(clients)], value_size, token),
        ),
        (f"conditional PUT, {clients} clients on one key", _chains(["shared"] * clients, value_size, token)),
    ]
    rows = []
    for index, (name, texts) in enumerate(plans):
        conditional = index > 0
        op = "paxos" if conditional else "write"  # the replica calls of its writes
        scripts = []
        for client, text in enumerate(texts):
            scripts.append(scratch / f"conditional-{index}-{client}.lua")
            scripts[-1].write_text(text)
        before = replica_calls([first], {op}, peers)
        measured = run_wrk(wrk, [first] * len(scripts), server_pids, scripts, len(scripts), duration)
        after = replica_calls([first], {op}, peers)
        calls = sum((after - before).values()) if before is not None and after is not None else None
        rows.append(ConditionalRow(name, conditional, len(scripts), measured, calls, len(peers)))
    return rows


def _chains(keys: Sequence[str], value_size: int, token: str) -> list[str]:
    """One client's script per key given (a key given twice: two clients on it)."""
    return [conditional_lua_script(_ENTITY, f"bench-cas-{key}", value_size, token) for key in keys]


def render_conditional(rows: Sequence[ConditionalRow]) -> str:
    """The rows as a Markdown table, and the lines that compare them: the uncontended p50 against the PUT's
    (and the goal), the contended throughput against the uncontended one's."""
    put = next((row for row in rows if not row.conditional), None)
    lines = [
        "| row | clients | writes/s | applied/s | p50 | p99 | p50 vs PUT | coordinator CPU/req "
        "| round trips/write | applied / 412 / 504 | errors |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        result = row.measured.result
        ratio = f"{result.p50 / put.measured.result.p50:.2f}x" if put and put.measured.result.p50 else "n/a"
        outcomes = result.outcomes
        counts = (outcomes.get(name, 0) for name in ("applied", "not_applied", "unknown"))
        answers = " / ".join(f"{count:,}" for count in counts) if row.conditional else "-"
        # A conditional row's 412s and 504s are outcomes, not errors: wrk counts every status >= 400.
        errors = outcomes.get("other", 0) + result.socket_errors if row.conditional else result.errors
        trips = "n/a" if row.round_trips is None else f"{row.round_trips:.2f}"
        cpu = "n/a" if row.coordinator_cpu is None else f"{row.coordinator_cpu * 1e6:,.0f} us"
        lines.append(
            f"| {row.name} | {row.clients} | {result.requests_per_sec:,.0f} | {row.applied_per_sec:,.0f} "
            f"| {format_latency(result.p50)} | {format_latency(result.p99)} | {ratio} | {cpu} | {trips} "
            f"| {answers} | {errors:,} |"
        )
    return "\n".join(lines + _verdicts(rows, put))


def _verdicts(rows: Sequence[ConditionalRow], put: ConditionalRow | None) -> list[str]:
    conditional = [row for row in rows if row.conditional]
    lines = [""]
    if put and conditional and put.measured.result.p50:
        ratio = conditional[0].measured.result.p50 / put.measured.result.p50
        verdict = "met" if ratio <= P50_GOAL else "NOT met"
        lines.append(
            f"An uncontended conditional write's p50 is {ratio:.2f}x a plain PUT's (goal: at most "
            f"{P50_GOAL:g}x): {verdict}."
        )
    if len(conditional) >= 3 and conditional[1].applied_per_sec:
        spread, shared = conditional[1], conditional[2]
        lines.append(
            f"{CONTENDING_CLIENTS} clients on one key applied {shared.applied_per_sec:,.0f} writes/s, "
            f"{shared.applied_per_sec / spread.applied_per_sec:.0%} of the {spread.applied_per_sec:,.0f}/s "
            f"they applied on {CONTENDING_CLIENTS} keys."
        )
    return lines
