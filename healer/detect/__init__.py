"""Detection: a catalog of failure patterns, one fast multi-pattern engine, and log sources."""
