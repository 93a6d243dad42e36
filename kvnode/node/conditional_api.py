"""Conditional writes and serial reads over HTTP (docs/conditional-writes.md): a ``PUT`` or ``DELETE`` of
``/v0/entity`` with ``If-Match: "V"`` or ``If-None-Match: *``, and ``GET /v0/entity?id=K&serial=1``, each
one Paxos round among the key's owners (kvnode.paxos.rounds).

A round asks a majority of the key's owners by itself, so ``ack`` or ``from`` on such a request is a
``400`` saying so, as is a malformed condition. The answers: ``201``/``202`` with the written version's
``ETag``; ``412`` when the condition does not hold, with the current version's ``ETag`` (none where the
key has no version) and a one-line reason; ``200`` with the value and its ``ETag`` (or ``404``) for a
serial read; ``504`` when the outcome is unknown (the next round on the key settles it: a serial read
tells whether it took effect); ``503`` while this node's clock is fenced, or while an owner speaks a
replica protocol without conditional writes (a rolling upgrade).
"""

from __future__ import annotations

from aiohttp import web

from kvnode.clocks.fence import ClockFenced
from kvnode.node.params import bad_request, text
from kvnode.node.parts import NodeParts
from kvnode.node.query import Query
from kvnode.paxos.conditions import (
    Condition,
    IfAbsent,
    MalformedCondition,
    etag,
    parse_condition,
    quoted_etag,
)
from kvnode.paxos.proposer import Applied, NotApplied, Outcome, Read, Unknown, Write
from kvnode.paxos.rounds import PaxosUnsupported
from kvnode.storage.records import Record

__all__ = ["condition_of", "conditional_write", "serial_read"]


def condition_of(request: web.Request, query: Query) -> Condition | None:
    """The request's condition (None: it has none); a 400 for a malformed one, or one beside ack or
    from."""
    headers = request.headers
    if_match, if_none_match = headers.get("If-Match"), headers.get("If-None-Match")
    if if_match is None and if_none_match is None:  # nearly every write: nothing to parse
        return None
    try:
        condition = parse_condition(if_match, if_none_match)
    except MalformedCondition as error:
        raise bad_request(str(error)) from None
    if condition is not None:
        _no_quorum_given(query, "a conditional write")
    return condition


def _no_quorum_given(query: Query, what: str) -> None:
    for name in ("ack", "from"):
        if name in query:
            raise bad_request(f"{what} takes no '{name}': its round asks a majority of the key's owners")


async def conditional_write(parts: NodeParts, key: bytes, write: Write, condition: Condition) -> web.Response:
    """One conditional PUT (``write`` a value) or DELETE, answered as the module says."""
    try:
        outcome = await parts.paxos.write(key, write, condition)
    except (ClockFenced, PaxosUnsupported) as error:
        return text(503, str(error))
    if isinstance(outcome, Applied):
        status, reason = (202, "accepted") if write.tombstone else (201, "created")
        return _with_etag(text(status, reason), outcome.record)
    if isinstance(outcome, NotApplied):
        return _precondition_failed(condition, outcome.current, parts.clock.current())
    return _unknown(outcome)


async def serial_read(parts: NodeParts, query: Query, key: bytes) -> web.Response:
    """``GET ?serial=1``: the key's current version after completing any conditional write left half-done."""
    if query.single("serial") != "1":
        raise bad_request(f"query parameter 'serial' takes only 1, got {query.single('serial')!r}")
    _no_quorum_given(query, "a serial read")
    try:
        outcome = await parts.paxos.read(key)
    except PaxosUnsupported as error:
        return text(503, str(error))
    if not isinstance(outcome, Read):
        return _unknown(outcome)
    current = outcome.current
    if current is None or current.absent_at(parts.clock.current()):
        return text(404, "no such entity")
    response = web.Response(body=current.value, content_type="application/octet-stream")
    return _with_etag(response, current)


def _precondition_failed(condition: Condition, current: Record | None, now_us: int) -> web.Response:
    if isinstance(condition, IfAbsent):
        reason = "the key has a live value (If-None-Match: *)"
    elif current is None:
        reason = f'the key has no version, not "{condition.etag}" (If-Match)'
    else:
        reason = f'the key\'s version is "{etag(current)}", not "{condition.etag}" (If-Match)'
    response = text(412, f"precondition failed: {reason}")
    return response if current is None else _with_etag(response, current)


def _unknown(outcome: Outcome) -> web.Response:
    why = outcome.reason if isinstance(outcome, Unknown) else f"no outcome ({outcome})"
    return text(
        504, f"outcome unknown: {why}; the write may yet take effect: read it with serial=1, then decide"
    )


def _with_etag(response: web.Response, record: Record) -> web.Response:
    response.headers["ETag"] = quoted_etag(record)
    return response
