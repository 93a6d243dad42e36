"""kvnode.ops.parsing: an error is one line and exit status 2; an unknown flag is refused first, by the
(sub)command it was given to, with the closest flag it has; no prefix stands for a flag."""

from __future__ import annotations

import argparse

import pytest

from kvnode.ops import cli
from kvnode.ops.parsing import OneLineParser


def parser() -> OneLineParser:
    made = OneLineParser(prog="tool")
    made.add_argument("--port", type=int, required=True)
    made.add_argument("-v", action="store_true")
    made.add_argument("rest", nargs="*")
    return made


def refusal(made: argparse.ArgumentParser, args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        made.parse_args(args)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_an_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        refusal(parser(), ["--port", "x"], capsys) == "tool: error: argument --port: invalid int value: 'x'\n"
    )
    assert refusal(parser(), [], capsys) == "tool: error: the following arguments are required: --port\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--prot", "1"], "unknown flag --prot: did you mean --port?"),  # before --port's absence
        (["--prot=1"], "unknown flag --prot: did you mean --port?"),
        (["--port", "1", "--po"], "unknown flag --po: did you mean --port?"),  # a prefix is no flag
        (["--port", "1", "--verbose"], "unknown flag --verbose"),  # nothing close
    ],
)
def test_an_unknown_flag_is_refused_with_the_closest_one(
    args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(parser(), args, capsys) == f"tool: error: {error}\n"


def test_what_follows_a_double_dash_is_not_a_flag() -> None:
    assert parser().parse_args(["--port", "1", "-v", "--", "--prot"]).rest == ["--prot"]


def test_no_prefix_stands_for_a_flag_even_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    made = OneLineParser(prog="tool", allow_abbrev=True)
    made.add_argument("--port", type=int)
    with pytest.raises(SystemExit):
        made.parse_args(["--po", "1"])
    assert capsys.readouterr().err == "tool: error: unknown flag --po: did you mean --port?\n"


def test_a_subcommands_flags_are_checked_by_its_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    top = OneLineParser(prog="tool")
    top.add_argument("--url")
    commands = top.add_subparsers(dest="command", parser_class=OneLineParser)
    commands.add_parser("status").add_argument("--json", action="store_true")
    assert top.parse_args(["--url", "u", "status", "--json"]).json
    assert refusal(top, ["status", "--url", "u"], capsys) == "tool status: error: unknown flag --url\n"
    assert refusal(top, ["--jsn", "status"], capsys) == "tool: error: unknown flag --jsn\n"


@pytest.mark.parametrize(
    ("args", "command", "meant"),
    [
        (["node", "--prot", "8080", "--data-dir", "d"], "node", "--port"),
        (["cluster", "--nodse", "5"], "cluster", "--nodes"),
        (["cluster", "--node", "3"], "cluster", "--nodes"),  # a prefix is no flag: it would start a cluster
        (["--nodse", "5"], "cluster", "--nodes"),  # the command a bare `python -m kvnode` runs
        (["node", "--port", "1", "--data-dir", "d", "--nodse"], "node", ""),  # no flag of node's is close
        (["admin", "--ulr", "u", "status"], "admin", "--url"),
        (["admin", "status", "--jsn"], "admin status", "--json"),
    ],
)
def test_a_misspelled_flag_is_named_by_its_command_with_the_closest_one(
    args: list[str], command: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command line of kvnode, as ``python -m kvnode`` parses it."""
    with pytest.raises(SystemExit) as exited:
        cli.main(args)
    assert exited.value.code == 2
    unknown = next(arg for arg in args if arg in ("--prot", "--nodse", "--node", "--ulr", "--jsn"))
    advice = f": did you mean {meant}?" if meant else ""
    assert capsys.readouterr().err == f"python -m kvnode {command}: error: unknown flag {unknown}{advice}\n"


def test_a_word_that_is_no_command_is_named_before_the_flags_after_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``nod --port 8085``: the mistake is the command, not a flag node has."""
    with pytest.raises(SystemExit):
        cli.main(["nod", "--port", "8085"])
    error = capsys.readouterr().err  # the list of choices is quoted as the Python version quotes it
    assert error.startswith(
        "python -m kvnode: error: argument {cluster,node,admin,check}: invalid choice: 'nod'"
    )
    assert error.count("\n") == 1
    top = OneLineParser(prog="tool")
    top.add_argument("--url")
    top.add_subparsers(dest="command", parser_class=OneLineParser).add_parser("status")
    assert "invalid choice: 'stauts'" in refusal(top, ["--url", "u", "stauts", "--json"], capsys)
    # A flag's value is no command: an unknown flag after it is still named.
    assert refusal(top, ["--url", "u", "--jsn", "status"], capsys) == "tool: error: unknown flag --jsn\n"
