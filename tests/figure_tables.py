"""Every table of figures described in kvnode, found by walking its modules: what the snapshot, /v0/stats,
/metrics and admin must each show, whichever module describes it."""

from __future__ import annotations

import importlib
import pkgutil

import kvnode
from kvnode.figures import Figures


def every_table() -> list[Figures]:
    """Every table of figures described in kvnode, wherever it is."""
    tables: list[Figures] = []
    for module in pkgutil.walk_packages(kvnode.__path__, "kvnode."):
        if module.name != "kvnode.__main__":
            found = vars(importlib.import_module(module.name)).values()
            tables += [table for table in found if isinstance(table, Figures) and table not in tables]
    return tables
