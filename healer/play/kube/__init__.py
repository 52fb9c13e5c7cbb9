"""The play healer's eyes in the cluster where the agents run.

- ``client``: the API over kr8s (why kr8s: see its docstring), ``KubeClient``;
- ``reflector``: list + watch of one resource (resourceVersion, bookmarks, 410 → relist,
  back-off);
- ``objects``: slimmed objects and who they belong to (play, agent, task from labels);
- ``rules``: the alerts A2, A3, A7, A8, A9 from the cluster's state;
- ``watcher``: the loop service ``kube`` that fires and clears them through
  ``healer.play.alerts.AlertSink``;
- ``logs``: pod logs followed through the API (``healer scan --k8s``, A3 progress);
- ``identity``: who healer is in the cluster and what it may do (``healer doctor``).

The core never imports this package.
"""
