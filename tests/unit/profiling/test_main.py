"""``python -m profiling``: compare --quick end to end on its smallest set (its report, the set kept
small, and every page rendered offline in headless Chromium where it is installed), a denied ptrace,
and Ctrl-C."""

from __future__ import annotations
