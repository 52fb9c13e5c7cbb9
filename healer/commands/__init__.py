"""One module per ``healer`` subcommand; see ``healer.cli``."""
