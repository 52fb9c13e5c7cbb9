"""The code kind: one verified path for every code fix."""
