"""The GitHub watcher of play sessions: the PRs, comments, reviews and CI of active plays.

- ``client``: conditional GETs (ETags → 304s), rate-limit aware (primary and secondary);
- ``pulls``: the tracked PR records both sources write, in one normalised shape;
- ``rules``: A1 comment order mismatch, A4 approval loop, A5 CI failure or merge conflict
  after approval — pure functions of a record;
- ``watcher``: plays ↔ PRs, progress notes (A3), findings fired and cleared as play alerts;
- ``poller``: the REST polling pass; ``webhook``: signed deliveries;
- ``service``: the loop's wiring; ``doctor``: ``healer doctor``'s GitHub line.
"""
