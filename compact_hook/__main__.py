"""``python -m compact_hook``: the operator command line (``compact-hook``)."""

import sys

from compact_hook.cli.main import main

sys.exit(main())
