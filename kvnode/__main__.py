"""``python -m kvnode``: ``check`` goes to kvnode.check.cli (a layer above the tooling), every other command
to kvnode.ops.cli. Each is imported for its own command only."""

import sys


def _main() -> int:
    if sys.argv[1:2] == ["check"]:
        from kvnode.check.cli import main as check

        return check(sys.argv[2:])
    from kvnode.ops.cli import main

    return main()


sys.exit(_main())
