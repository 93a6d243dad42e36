"""``python -m kvnode admin`` against real nodes: which members a node
reaches, where a key lives, the hints it keeps; tables for people, ``--json`` for scripts, exit 2 with one
line when the node cannot be asked. And against canned nodes: ``--wait`` following a change on the one
member that walks it, as the node asked named it, until the version past it."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping

import pytest

from kvnode.ops import admin as admin_tool
from tests.canned_http import Answer, canned_server


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
