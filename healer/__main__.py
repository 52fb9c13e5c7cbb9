"""`python -m healer` is the `healer` command."""

from healer.cli import main

raise SystemExit(main())
