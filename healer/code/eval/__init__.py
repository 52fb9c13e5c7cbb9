"""``healer eval``: graded replays of real bugs.

A **fixture** (``evals/fixtures/<name>/``, loaded by ``fixtures``) is a small repository with a
bug, the error report that bug produced, a hidden check the agent never sees, and scripted
replays (a correct patch, a wrong patch, an unfixable note). The **runner** (``runner``) heals
each fixture × replay in a fresh temporary repository through healer's real intake
(``drive``: the one place that knows how a report becomes an ended attempt record), then the
**grader** (``grade``) scores the record and the hidden check on the PR head. ``table`` prints
and writes the result. See docs/eval.md.
"""
