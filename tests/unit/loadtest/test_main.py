"""``python -m loadtest`` (loadtest.__main__) in this process: a command that needs the load extra is
refused in one line naming the command that installs it when the extra is missing, before any work; and
``rate`` against a server with no /v0/cluster (a hello-world, another store) falls back to round-robin and
says so, or, with ``--routing token-aware`` asked for, is refused in one line naming --routing round-robin."""

from __future__ import annotations

import sys

import pytest

from loadtest.__main__ import NEEDS_LOAD_EXTRA, main
from tests.canned_http import canned_server


@pytest.mark.parametrize("command", sorted(NEEDS_LOAD_EXTRA))
def test_a_command_that_needs_the_load_extra_names_the_command_that_installs_it(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed, as after `make run`
    assert main([command, "--quick"]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # before anything else: `ui` printed its workload, then failed on locust
    assert out.err == (
        f"python -m loadtest {command} needs the load extra (matplotlib is not installed): install it with "
        "`make load-tools` (that is, .venv/bin/pip install -e '.[load]')\n"
    )


@pytest.fixture(autouse=True)
def signals_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() makes SIGTERM stop the command: not the test process's."""
    monkeypatch.setattr("loadtest.__main__._stop_on_signals", lambda: None)


def rate(url: str, *extra: str) -> list[str]:
    return ["rate", "--url", url, "--op", "get", "--rate", "20", "--duration", "0.2", "--keys", "3", *extra]


def test_rate_against_a_server_with_no_cluster_view_falls_back_to_round_robin_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with canned_server({}) as server:  # every path 404, /v0/cluster too
        main(rate(server.url))
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "round-robin over --url, as --routing round-robin: token-aware routing learns the members from "
        f"/v0/cluster: {server.url} gave none (/v0/cluster answered 404 no such path)"
    )
    assert any(sent.path.startswith("/v0/entity?") for sent in server.requests)  # the load went there


def test_rate_with_token_aware_asked_for_is_refused_in_one_line_naming_round_robin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with canned_server({}) as server:
        assert main(rate(server.url, "--routing", "token-aware")) == 2
    out = capsys.readouterr()
    assert out.err == (
        "loadtest rate: token-aware routing learns the members from /v0/cluster: "
        f"{server.url} gave none (/v0/cluster answered 404 no such path); for a server that is not kvnode, "
        "give --routing round-robin\n"
    )
    assert [sent.path for sent in server.requests] == ["/v0/cluster"]  # no load sent
