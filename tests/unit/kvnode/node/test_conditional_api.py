"""kvnode.node.conditional_api on nodes served in this process: ETags on every 200 and write answer, the
same version named alike by every node; If-None-Match: * creates once; If-Match updates and deletes only
the version it names, else 412 with the current ETag (none where the key has no version) and nothing
written; a serial read; one-line 400s for a malformed condition, ack or from beside one, and a bad serial;
a round without a quorum is a 504 saying the outcome is unknown."""

from __future__ import annotations

import pytest

from kvnode.ops.ports import free_ports
from tests.drivers import Serve, ServedNode


async def ask(
    node: ServedNode, method: str, query: str, body: bytes | None = None, **headers: str
) -> tuple[int, str, str | None]:
    """Status, body and ETag of one request to /v0/entity."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    async with node.session.request(
        method, f"{node.url}/v0/entity?{query}", data=body, headers=named
    ) as response:
        return response.status, await response.text(), response.headers.get("ETag")


@pytest.fixture
async def pair(serve: Serve) -> tuple[ServedNode, ServedNode]:
    """Two members of a cluster of two, N = 2: a round needs both."""
    ports = free_ports(2)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    nodes = [await serve(port=port, cluster=members, timeout_ms=500) for port in ports]
    for node in nodes:
        assert await node.parts.peers[0].reach(5.0)
    return nodes[0], nodes[1]


async def test_every_200_and_write_answer_names_its_version_alike_on_every_node(
    pair: tuple[ServedNode, ServedNode],
) -> None:
    first, second = pair
    status, _, written = await ask(first, "PUT", "id=k", b"v")
    assert status == 201 and written is not None and written.startswith('"')
    assert (await ask(first, "GET", "id=k"))[::2] == (200, written)
    assert (await ask(second, "GET", "id=k"))[::2] == (200, written)
    assert (await ask(second, "GET", "id=k&serial=1")) == (200, "v", written)
    status, _, deleted = await ask(second, "DELETE", "id=k")
    assert status == 202 and deleted not in (None, written)
    assert (await ask(first, "GET", "id=k&serial=1"))[:2] == (404, "no such entity\n")


async def test_if_none_match_creates_once_and_if_match_updates_only_the_version_named(
    pair: tuple[ServedNode, ServedNode],
) -> None:
    first, second = pair
    status, _, created = await ask(first, "PUT", "id=c", b"one", If_None_Match="*")
    assert status == 201 and created is not None
    assert await ask(second, "PUT", "id=c", b"two", If_None_Match="*") == (
        412,
        "precondition failed: the key has a live value (If-None-Match: *)\n",
        created,
    )
    status, _, updated = await ask(second, "PUT", "id=c", b"two", If_Match=created)
    assert status == 201 and updated not in (None, created)
    status, reason, current = await ask(first, "DELETE", "id=c", If_Match=created)
    assert (status, current) == (412, updated)
    assert reason == f"precondition failed: the key's version is {updated}, not {created} (If-Match)\n"
    assert (await ask(first, "GET", "id=c"))[:2] == (200, "two")  # nothing written
    status, _, tombstone = await ask(first, "DELETE", "id=c", If_Match=updated)
    assert status == 202 and tombstone is not None
    # Deleted: created again, and a condition naming the tombstone applies too.
    assert (await ask(second, "PUT", "id=c", b"again", If_Match=tombstone))[0] == 201


async def test_a_key_with_no_version_fails_if_match_without_an_etag(
    pair: tuple[ServedNode, ServedNode],
) -> None:
    first, _ = pair
    etag = '"' + "0" * 32 + '"'
    status, reason, current = await ask(first, "PUT", "id=none", b"v", If_Match=etag)
    assert (status, current) == (412, None)
    assert reason == f"precondition failed: the key has no version, not {etag} (If-Match)\n"


@pytest.mark.parametrize(
    ("method", "query", "headers", "reason"),
    [
        ("PUT", "id=k", {"If-Match": "abc"}, 'If-Match takes an ETag in double quotes, such as "V"'),
        ("PUT", "id=k", {"If-None-Match": '"x"'}, "If-None-Match takes only *"),
        ("DELETE", "id=k", {"If-Match": "*"}, 'If-Match takes one ETag such as "V", not *'),
        (
            "PUT",
            "id=k",
            {"If-Match": '"a"', "If-None-Match": "*"},
            "If-Match and If-None-Match together: a conditional write takes one",
        ),
        (
            "PUT",
            "id=k&ack=1",
            {"If-None-Match": "*"},
            "a conditional write takes no 'ack': its round asks a majority of the key's owners",
        ),
        (
            "DELETE",
            "id=k&from=1",
            {"If-Match": '"' + "0" * 32 + '"'},
            "a conditional write takes no 'from': its round asks a majority of the key's owners",
        ),
        ("GET", "id=k&serial=yes", {}, "query parameter 'serial' takes only 1, got 'yes'"),
        (
            "GET",
            "id=k&serial=1&ack=2",
            {},
            "a serial read takes no 'ack': its round asks a majority of the key's owners",
        ),
    ],
)
async def test_a_malformed_condition_or_a_quorum_beside_one_is_a_400_in_one_line(
    served: ServedNode, method: str, query: str, headers: dict[str, str], reason: str
) -> None:
    async with served.session.request(
        method, f"{served.url}/v0/entity?{query}", data=b"v" if method == "PUT" else None, headers=headers
    ) as response:
        assert (response.status, await response.text()) == (400, reason + "\n")
    assert (await ask(served, "GET", "id=k"))[0] == 404  # nothing written


async def test_a_round_without_a_quorum_is_a_504_saying_the_outcome_is_unknown(
    one_of_three: ServedNode,
) -> None:
    one_of_three.clock_checked()  # its peers went down after they answered (else: 503, clock unchecked)
    status, reason, _ = await ask(one_of_three, "PUT", "id=k", b"v", If_None_Match="*")
    assert status == 504
    assert reason.startswith("outcome unknown: no quorum in the prepare phase before the timeout")
    assert reason.endswith("the write may yet take effect: read it with serial=1, then decide\n")
