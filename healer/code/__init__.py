"""The code kind: one verified attempt flow for every code fix, whichever source reported it."""
