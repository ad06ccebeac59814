"""Write docs/configuration.md's tables from the code (``compact_hook.settings.reference``).

.venv/bin/python scripts/config_reference.py          # rewrite the tables
.venv/bin/python scripts/config_reference.py --check  # exit 1 if they are stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compact_hook.settings.reference import with_tables, write_readme

README = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the tables are stale")
    args = parser.parse_args()
    if args.check:
        text = README.read_text(encoding="utf-8")
        stale = with_tables(text) != text
        print("docs/configuration.md tables are stale" if stale else "docs/configuration.md is up to date")
        return 1 if stale else 0
    changed = write_readme(README)
    print("docs/configuration.md updated" if changed else "docs/configuration.md already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
