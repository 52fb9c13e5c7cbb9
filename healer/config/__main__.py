"""`python -m healer.config [--check]`: write (or check) schemas/config.schema.json."""

from __future__ import annotations

import sys

from healer.config.schema import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
