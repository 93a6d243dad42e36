"""kvnode.ops.output_relay: a server's output held while it starts, its last line kept, then passed on to
this process's stderr (all at once on release, each line as it comes after)."""

from __future__ import annotations

import os

import pytest

from kvnode.ops.output_relay import OutputRelay


def test_output_is_held_until_released_then_passed_on_and_the_last_line_is_kept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    read, write = os.pipe()
    relay = OutputRelay(os.fdopen(read, "rb"))
    os.write(write, b"starting\nkvnode: port 8080 is taken\n\n")
    os.close(write)
    relay.drain()  # the writer is gone: everything it wrote has been read
    assert relay.last_line == "kvnode: port 8080 is taken"  # blank lines are not a last line
    assert capsys.readouterr().err == ""  # held while the server starts
    relay.release()
    assert capsys.readouterr().err == "starting\nkvnode: port 8080 is taken\n\n"


def test_lines_after_the_release_go_straight_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    read, write = os.pipe()
    relay = OutputRelay(os.fdopen(read, "rb"))
    relay.release()
    os.write(write, b"serving\n")
    os.close(write)
    relay.drain()
    assert capsys.readouterr().err == "serving\n"
    assert relay.last_line == "serving"
