"""/v0/scan (kvnode.node.scan_api) on nodes served in this process: the records of a range in chunks, a
page at a time with a limit and the next page's token, one-line 400s for bad parameters, and a 503 when
too many members do not answer. (tests/cluster/test_cluster_scan.py merges real members' versions.)"""

from __future__ import annotations

import pytest

from kvnode.client.chunks import records
from kvnode.node.scan_api import NEXT_PAGE_HEADER
from kvnode.ops.ports import free_ports
from tests.drivers import Serve, ServedNode

KEYS = [f"key-{index}" for index in range(5)]


async def scan(node: ServedNode, query: str) -> tuple[list[tuple[str, bytes]], str | None]:
    """The records of one answer, and the page it names next."""
    async with node.session.get(f"{node.url}/v0/scan?{query}") as response:
        assert response.status == 200, await response.text()
        return [record async for record in records(response)], response.headers.get(NEXT_PAGE_HEADER)


@pytest.fixture
async def filled(served: ServedNode) -> ServedNode:
    for key in KEYS:
        await served.put(key, key.encode())
    await served.put("other", b"outside the range")
    return served


async def test_a_range_is_scanned_in_key_order_to_its_end(filled: ServedNode) -> None:
    assert await scan(filled, "start=key-&end=key-4") == ([(key, key.encode()) for key in KEYS[:4]], None)
    to_the_last = [(key, key.encode()) for key in KEYS[3:]] + [("other", b"outside the range")]
    assert await scan(filled, "start=key-3") == (to_the_last, None)


async def test_a_limit_pages_the_scan_and_each_page_names_the_next(filled: ServedNode) -> None:
    first, page = await scan(filled, "start=key-&end=key-~&limit=2")
    assert [key for key, _ in first] == KEYS[:2]
    assert page == (KEYS[1].encode() + b"\x00").hex()
    second, page = await scan(filled, f"start=key-&end=key-~&limit=2&page={page}")
    assert [key for key, _ in second] == KEYS[2:4]
    last, page = await scan(filled, f"start=key-&end=key-~&limit=2&page={page}")
    assert ([key for key, _ in last], page) == (KEYS[4:], None)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("start=a&stop=b", "unknown query parameter 'stop'"),
        ("end=b", "query parameter 'start' is required"),
        ("start=a&limit=0", "query parameter 'limit' must be from 1 to 10000, not '0'"),
        ("start=a&limit=10001", "query parameter 'limit' must be from 1 to 10000, not '10001'"),
        ("start=a&limit=-1", "query parameter 'limit' must be from 1 to 10000, not '-1'"),
        ("start=a&page=zz", "query parameter 'page' is not a page token: 'zz'"),
        ("start=b&page=" + b"a".hex(), "query parameter 'page' names a key before 'start'"),
    ],
)
async def test_bad_parameters_are_400_in_one_line(served: ServedNode, query: str, reason: str) -> None:
    status, body = await served.call("GET", f"/v0/scan?{query}")
    assert status == 400 and body.startswith(reason.encode()) and body.count(b"\n") == 1


async def test_with_n_members_down_the_scan_is_503_naming_them(serve: Serve) -> None:
    own, gone = free_ports(2)
    members = (f"http://127.0.0.1:{own}", f"http://127.0.0.1:{gone}")
    node = await serve(port=own, cluster=members, replication_factor=1, timeout_ms=200)
    status, body = await node.call("GET", "/v0/scan?start=a")
    assert status == 503
    assert body == f"cannot scan every key: 1 members did not answer, N=1: {members[1]}\n".encode()


async def test_with_fewer_than_n_members_down_the_others_answer(serve: Serve) -> None:
    own, gone = free_ports(2)
    members = (f"http://127.0.0.1:{own}", f"http://127.0.0.1:{gone}")
    node = await serve(port=own, cluster=members, timeout_ms=200)
    node.clock_checked()  # the peer answered once, then went down
    status, body = await node.call("PUT", "/v0/entity?id=k&ack=1", b"v")
    assert status == 201, body
    assert await scan(node, "start=a") == ([("k", b"v")], None)
