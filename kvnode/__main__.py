"""``python -m kvnode``: see kvnode.cli."""

import sys

from kvnode.cli import main

sys.exit(main())
