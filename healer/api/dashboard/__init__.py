"""The web dashboard: what is broken, what healer is doing, what needs a person — live.

Served by the API at ``/`` and ``/ui/…`` (``healer serve``, ``healer loop``): server-rendered
Jinja pages that read the same state ``healer status`` reads, made live by Server-Sent Events
(``live``) through the vendored htmx and its SSE extension (``static/``, with their licences).
Views: incidents of every kind and each one's timeline, runs and verdicts (``incidents``);
escalation files for a person, with "mark handled" and "heal again" (``actions``); the fleet's
nodes × channels, plays and healer's own health (``panels``). Login, cookies and CSRF tokens:
``auth``; the routes and their security headers: ``routes``.
"""
