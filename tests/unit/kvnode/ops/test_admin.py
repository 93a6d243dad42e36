"""``python -m kvnode admin`` against real nodes: which members a node
reaches, where a key lives and its owners' Paxos state, the hints it keeps; tables for people, ``--json``
for scripts, exit 2 with one line when the node cannot be asked. And against canned nodes: ``--wait``
following a change on the one member that walks it, as the node asked named it, until the version past
it; locate asking every owner of a key's rounds, one gaining it included, with the admin token."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kvnode.ops import admin as admin_tool
from kvnode.ops.ports import free_ports
from kvnode.topology.placement import Placement
from tests.canned_http import Answer, canned_server


def test_locate_asks_every_owner_of_the_keys_rounds_with_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A member joining that will own the key counts in its rounds: it is asked too (and does not answer)."""
    answers: dict[str, Answer] = {}
    nothing = json.dumps({"promised": "7.00000000000000aa", "accepted": None, "committed": None}).encode()
    with canned_server(answers) as a, canned_server(answers) as b, canned_server(answers) as c:
        joining = f"http://127.0.0.1:{free_ports(1)[0]}"
        urls = [a.url, b.url, c.url, joining]
        key = next(
            f"k{i}"
            for i in range(100)
            if joining in Placement(urls, replication=3).replicas_for(b"k%d" % i, 3)
        )
        view = {
            "node": a.url, "cluster": urls, "tokens": urls, "joining": [joining], "leaving": [],
            "replication_factor": 3, "next_replication_factor": 0,
            "members": [{"url": url, "self": url == a.url, "reachable": url != joining} for url in urls],
        }  # fmt: skip
        answers["/v0/cluster"] = Answer(200, json.dumps(view).encode())
        answers[f"/v0/paxos?id={key}"] = Answer(200, nothing)
        token = tmp_path / "admin.token"
        token.write_text("s3cret\n")
        assert admin_tool.main(["--url", a.url, "--token-file", str(token), "locate", key, "--json"]) == 0
    located = json.loads(capsys.readouterr().out)
    states = {r["url"]: r["paxos"] for r in located["replicas"]}
    answered = {"answered": True, "promised": "7.00000000000000aa", "accepted": None, "committed": None}
    assert {url: states[url] for url in urls[:3]} == dict.fromkeys(urls[:3], answered)
    assert states[joining] == {"answered": False, "error": f"cannot reach {joining}: connection refused"}
    for server in (a, b, c):
        asked = [sent for sent in server.requests if sent.path.startswith("/v0/paxos")]
        assert [sent.headers["Authorization"] for sent in asked] == ["Bearer s3cret"]


class InTurn(Mapping[str, Answer]):
    """Each path's answers in turn, the last one again once the others were given."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self._answers = answers

    def __getitem__(self, path: str) -> Answer:
        answers = self._answers[path]
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._answers)

    def __len__(self) -> int:
        return len(self._answers)


def walker_view(version: int, step: str, streamed: int) -> Answer:
    """The /v0/cluster of a member that walks the change of version 2 (the parts admin reads)."""
    own_part = {"version": 2, "step": step, "streamed": streamed}
    return Answer(200, json.dumps({"membership_version": version, "own_part": own_part}).encode())


@pytest.mark.parametrize("command", ["leave", "replication-factor"])
def test_wait_follows_a_change_asking_only_the_member_that_walks_it(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(admin_tool, "_POLL_S", 0.0)
    streaming = walker_view(2, "stream", 10)
    views = [Answer(0), streaming, streaming, walker_view(3, "done", 25)]  # killed, started again, done
    with canned_server(InTurn({"/v0/cluster": views})) as walker:
        change = {"kind": command, "member": walker.url, "walker": walker.url, "version": 2}
        if command == "leave":
            path, argv = "/v0/leave?" + urllib.parse.urlencode({"member": walker.url}), [walker.url]
        else:
            path, argv = "/v0/replication-factor?n=2", ["2"]
        started = json.dumps({"membership_version": 2, "change": change}).encode()
        with canned_server({path: Answer(202, started)}) as asked:
            assert admin_tool.main(["--url", asked.url, command, *argv, "--wait"]) == 0
    shown, progress = capsys.readouterr()
    assert [sent.path for sent in walker.requests] == ["/v0/cluster"] * 4  # the walker, and no other
    moving = {
        "leave": f"{walker.url} leaving: 10 records streamed to their next owners",
        "replication-factor": "replication factor moving to 2: 10 records streamed",
    }
    gone = f"{walker.url} does not answer; the change goes on once it is started again"
    assert progress.splitlines() == [gone, moving[command]]  # each line once, as it changes
    ended = {
        "leave": f"{walker.url} left (membership version 3, 25 records streamed, ",
        "replication-factor": "replication factor 2 (membership version 3, 25 records streamed, ",
    }
    assert shown.startswith(ended[command]), shown


def test_ring_counts_each_zones_and_each_datacenters_share_of_a_keys_copies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three zones of two, N = 3: every key is on three zones, so each zone holds exactly a third of the
    copies; two datacenters, 2 and 1 copies a key: two thirds and one third, and each datacenter's first
    replicas shared among its own members."""
    urls = [f"http://127.0.0.{host}:8080" for host in range(1, 7)]
    view = {
        "node": urls[0], "membership_version": 1, "cluster": urls, "tokens": urls, "joining": [],
        "leaving": [], "zones": ["a", "a", "b", "b", "c", "c"], "datacenters": ["dc1"] * 6,
        "replication_factor": 3, "next_replication_factor": 0,
    }  # fmt: skip
    answers = {"/v0/cluster": Answer(200, json.dumps(view).encode())}
    with canned_server(answers) as node:
        assert admin_tool.main(["--url", node.url, "ring", "--json"]) == 0
        zoned = json.loads(capsys.readouterr().out)
        spread = view | {
            "datacenters": ["east"] * 3 + ["west"] * 3,
            "replication_factor": {"east": 2, "west": 1},
        }
        answers["/v0/cluster"] = Answer(200, json.dumps(spread).encode())
        assert admin_tool.main(["--url", node.url, "ring", "--json"]) == 0
        spread_ring = json.loads(capsys.readouterr().out)
    assert [(zone["zone"], zone["members"], zone["owner_share"]) for zone in zoned["zones"]] == [
        ("a", 2, 0.3333), ("b", 2, 0.3333), ("c", 2, 0.3333),
    ]  # fmt: skip
    assert zoned["datacenters"] == [
        {"datacenter": "dc1", "members": 6, "owners_per_key": 3, "owner_share": 1.0}
    ]
    shares = [
        (dc["datacenter"], dc["owners_per_key"], dc["owner_share"]) for dc in spread_ring["datacenters"]
    ]
    assert shares == [("east", 2, 0.6667), ("west", 1, 0.3333)]
    firsts = [member["first_replica_share"] for member in spread_ring["members"]]  # in each datacenter
    assert abs(sum(firsts[:3]) - 1) < 1e-3 and abs(sum(firsts[3:]) - 1) < 1e-3
