"""``python -m healer.loop``: the command lives with the others (``healer loop``)."""

from healer.commands.loop import main

raise SystemExit(main())
