"""``python -m kvnode``: see kvnode.ops.cli."""

import sys

from kvnode.ops.cli import main

sys.exit(main())
