"""A checker's verdict: valid, invalid or unknown, its counts, and the problems it found, each one line
naming the operations (by their history index); and the exit status of a whole check.

>>> stale = Verdict("register", False, {"reads": 40, "stale": 1}, ["read op 12 returned 1.0 ..."])
>>> stale.line()
'register: invalid (reads 40, stale 1)'
>>> exit_status([Verdict("set", True, {}), stale])
1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["EXIT_INVALID", "EXIT_UNKNOWN", "EXIT_VALID", "Verdict", "exit_status"]

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN = 0, 1, 2


@dataclass(frozen=True)
class Verdict:
    """``valid``: True, False (invalid: ``problems`` says what) or None (unknown: ``problems`` says why)."""

    checker: str
    valid: bool | None
    counts: Mapping[str, int] = field(default_factory=dict)
    problems: Sequence[str] = ()

    @property
    def word(self) -> str:
        return {True: "valid", False: "invalid", None: "unknown"}[self.valid]

    def line(self) -> str:
        counts = ", ".join(f"{name} {count}" for name, count in self.counts.items())
        return f"{self.checker}: {self.word}" + (f" ({counts})" if counts else "")


def exit_status(verdicts: Sequence[Verdict]) -> int:
    """0 when every verdict is valid, 1 when one is invalid, else 2 (one is unknown, or there is none)."""
    if any(verdict.valid is False for verdict in verdicts):
        return EXIT_INVALID
    if verdicts and all(verdict.valid for verdict in verdicts):
        return EXIT_VALID
    return EXIT_UNKNOWN
