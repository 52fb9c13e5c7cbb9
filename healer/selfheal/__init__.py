"""Self-healing for reported errors: fingerprint, gate, and heal in a worktree.

Public surface: ``SelfHealService`` (service.py) behind the MCP tools, HTTP routes and CLI;
``Dispatcher`` (dispatch.py), report_error's adapter to the one code attempt flow
(``healer.code.attempt``). The scrubber and the validator that
everything outbound goes through are ``healer.core.publish``.
"""
