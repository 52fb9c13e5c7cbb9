"""The fleet healer: channels P1-P7 to every peer, a node daemon per machine, a watchdog,
the repair ladder and the healing loop (``healer.fleet.heal``) that keeps every channel to
every node working, or hands a person a clear escalation.

Start at ``channels`` (what a channel is), ``heal`` (the master healer) and ``service`` (how
the loop runs it); ``node`` is the daemon, ``playbooks`` the healing agents.
"""
