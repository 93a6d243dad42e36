"""The command line, ``python -m kvnode [cluster|node|admin] ...``: parses it (kvnode.ops.flags) and hands
over to one node, a local cluster or the admin tool."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from kvnode.config import NodeConfig
from kvnode.ops.data_dir import data_dir_holder
from kvnode.ops.flags import parse_args, warn_unknown_variables

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Imported per command: admin starts without loading the server, a node without the launcher.
    if args and args[0] == "admin":
        from kvnode.ops.admin import main as admin_main

        return admin_main(args[1:])
    warn_unknown_variables(os.environ)
    config = parse_args(args, os.environ)
    if isinstance(config, NodeConfig):
        holder = data_dir_holder(config.data_dir)
        if holder is not None:
            print(
                f"kvnode: data dir {config.data_dir} is in use by another kvnode process (pid {holder})",
                file=sys.stderr,
            )
            return 2
        from kvnode.node.serving import run_node

        return run_node(config)
    from kvnode.ops.local_cluster import run_cluster

    return run_cluster(config)
