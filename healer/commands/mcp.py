"""`healer mcp`: the report_error / get_healing_status tools over MCP on stdio."""

from __future__ import annotations

from healer.commands._common import add_settings_args, parser, run, settings_from

HELP = "serve report_error / get_healing_status over MCP (stdio)"

EPILOG = """\
Claude Code starts this from the repository's .mcp.json:

  {"mcpServers": {"healer": {"command": "healer", "args": ["mcp"]}}}

stdout carries the MCP protocol; logs go to stderr.
exit codes: 0 the client closed the session, 2 bad settings, 3 the mcp SDK is missing.
"""


def main(argv: list[str]) -> int:
    p = parser("mcp", HELP, EPILOG)
    add_settings_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        settings = settings_from(args)
        try:
            import mcp  # noqa: F401 - only checking that the SDK is installed
        except ImportError:
            from healer.errors import UnavailableError

            raise UnavailableError("the `mcp` package is not installed") from None
        from healer.mcp_server import serve

        serve(settings)
        return 0

    return run(body)
