"""``python -m kvnode``: ``check`` goes to kvnode.check.cli (a layer above the tooling), every other command
to kvnode.ops.cli. Each is imported for its own command only; ``node`` first chooses its hot path
(kvnode.hot_path: compiled where a build of these sources exists)."""

import sys

from kvnode import hot_path


def _main() -> int:
    if sys.argv[1:2] == ["node"]:  # the one command that serves requests
        hot_path.activate()
    if sys.argv[1:2] == ["check"]:
        from kvnode.check.cli import main as check

        return check(sys.argv[2:])
    from kvnode.ops.cli import main

    return main()


sys.exit(_main())
