"""``python -m kvnode admin`` against canned nodes: ``--wait`` following a change on the one member that
walks it, as the node asked named it, until the version past it; locate asking every owner of a key's
rounds, one gaining it included, with the admin token; ``cleanup`` started on every member the node asked
lists, followed to each one's end, exit 1 naming the members that could not complete. (What the read-only
commands report: test_admin_reports.py.)"""

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


def cleanup_run(done: bool, dropped: int = 0, unconfirmed_by: str = "") -> Answer:
    """A member's ``/v0/cleanup`` (the parts admin reads)."""
    summary = f"{dropped} surplus copies dropped ({dropped * 100} bytes) of 1000 versions read; in 0.5 s"
    if unconfirmed_by:
        summary = f"{dropped} surplus copies dropped; 2 kept: not confirmed by {unconfirmed_by} (2); in 0.5 s"
    run = {
        "done": done,
        "completed": done and not unconfirmed_by,
        "scanned": 1000 if done else 400,
        "dropped": dropped,
        "bytes": dropped * 100,
        "summary": summary,
    }
    return Answer(202, json.dumps(run).encode())


def test_cleanup_waits_for_every_member_and_names_those_that_could_not_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(admin_tool, "_POLL_S", 0.0)
    asked: dict[str, list[Answer]] = {"/v0/cleanup": [cleanup_run(False), cleanup_run(True, dropped=7)]}
    behind: dict[str, list[Answer]] = {
        "/v0/cleanup": [cleanup_run(False), cleanup_run(True, 3, "http://x:1")]
    }
    with (
        canned_server(InTurn(asked)) as first,
        canned_server(InTurn(behind)) as second,
        canned_server({"/v0/cleanup": Answer(0)}) as gone,
    ):
        members = [first.url, second.url, gone.url]
        asked["/v0/cluster"] = [Answer(200, json.dumps({"cluster": members}).encode())]
        assert admin_tool.main(["--url", first.url, "cleanup", "--wait"]) == 1
    shown, said = capsys.readouterr()
    assert [(sent.method, sent.path) for sent in second.requests] == [("POST", "/v0/cleanup")] + [
        ("GET", "/v0/cleanup")
    ] * (len(second.requests) - 1)
    assert shown.splitlines() == [
        f"{first.url}: 7 surplus copies dropped (700 bytes) of 1000 versions read; in 0.5 s",
        f"{second.url}: 3 surplus copies dropped; 2 kept: not confirmed by http://x:1 (2); in 0.5 s",
        "cleanup completed on 1 of 3 members: 10 surplus copies dropped (1000 bytes)",
    ]
    progress, *failures = said.splitlines()
    assert progress == "cleaning up: 0 of 2 members done, 800 versions read, 0 surplus copies dropped"
    assert failures[0].startswith(f"kvnode admin: cleanup did not complete on {gone.url}: cannot read ")
    assert failures[1] == (
        f"kvnode admin: cleanup did not complete on {second.url}: 3 surplus copies dropped; 2 kept: not "
        "confirmed by http://x:1 (2); in 0.5 s"
    )


def test_cleanup_without_wait_starts_it_on_every_member_and_json_shows_each_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers: dict[str, Answer] = {"/v0/cleanup": cleanup_run(False)}
    with canned_server(answers) as only:
        answers["/v0/cluster"] = Answer(200, json.dumps({"cluster": [only.url]}).encode())
        assert admin_tool.main(["--url", only.url, "cleanup"]) == 0
        assert capsys.readouterr().out == "cleanup started on 1 of 1 members; follow it with --wait\n"
        assert admin_tool.main(["--url", only.url, "cleanup", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["failed"] == {} and shown["members"][only.url]["scanned"] == 400
