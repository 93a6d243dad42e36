"""argparse for every command line of kvnode: an error is one line on stderr and exit status 2, and a
misspelt flag is named, by the (sub)command it was given to, with the closest one it has.

>>> parser = OneLineParser(prog="python -m kvnode node")
>>> _ = parser.add_argument("--port", type=int, required=True)
>>> parser.parse_args(["--prot", "8080"])
Traceback (most recent call last):
SystemExit: 2
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr (no usage block) and exit status 2, and an unknown
    flag is refused by the parser it was given to (a subcommand's names the subcommand) with the closest
    flag it knows, before argparse would complain of a missing required one instead. No prefix stands for
    a flag: ``cluster --node 3`` would otherwise start a cluster as ``--nodes 3``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; the same contract
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        arguments = sys.argv[1:] if args is None else list(args)
        unknown = self._first_unknown_flag(arguments)
        if unknown is not None:
            close = difflib.get_close_matches(unknown, self._long_flags(), n=1, cutoff=0.75)
            self.error(f"unknown flag {unknown}" + (f": did you mean {close[0]}?" if close else ""))
        return super().parse_known_args(arguments, namespace)

    def _first_unknown_flag(self, arguments: Sequence[str]) -> str | None:
        """The first ``--flag`` this parser does not have, before the subcommand (whose parser checks the
        rest) or ``--``. Where a subcommand is due, a word that is no command ends the search: argparse
        refuses it as an invalid choice, the mistake to name first (``nod --port 1`` is no unknown flag
        --port)."""
        commands = self._command_names()
        value_due = False  # the argument is the value of the flag before it
        for argument in arguments:
            if argument == "--" or argument in commands:
                return None
            if value_due:
                value_due = False
                continue
            flag = argument.split("=", 1)[0]
            if not flag.startswith("-"):
                if commands:
                    return None
                continue
            action = self._option_string_actions.get(flag)
            if action is None and flag.startswith("--"):
                return flag
            value_due = action is not None and action.nargs != 0 and "=" not in argument
        return None

    def _long_flags(self) -> list[str]:
        return [flag for flag in self._option_string_actions if flag.startswith("--")]

    def _command_names(self) -> set[str]:
        return {
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        }
