"""Agent definitions: every bundled one parses and is usable; bad files fail with the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from healer.agents import KNOWN_TOOLS, get_definition, load_definitions, parse_definition
from healer.agents.definitions import agents_dir
from healer.core.schemas import schema
from healer.errors import ConfigError, UsageError

REQUIRED = {"evaluation-agent", "remediation-agent", "master-healer", "channel-diagnoser",
            "daemon-restarter", "tunnel-establisher", "config-updater", "nats-reconnector",
            "healing-agent", "living-context-healer"}

GOOD = """---
name: probe-agent
description: Probes things. Use when a test needs an agent.
tools: Read, Write
model: sonnet
maxTurns: 5
---

You are a probe.
"""


class TestBundledDefinitions:
    def test_every_required_agent_exists(self) -> None:
        """The bundle ships at least the ten agents the design names."""
        assert set(load_definitions()) >= REQUIRED

    def test_each_file_parses_with_claude_code_fields(self) -> None:
        """Every agents/*.md has name = file name, a description, tools and a model."""
        for path in sorted(agents_dir().glob("*.md")):
            d = parse_definition(path.read_text(), path=str(path))
            assert d.name == path.stem
            assert len(d.description) > 40
            assert d.tools and d.model in {"sonnet", "opus", "haiku", "inherit"}
            # Claude Code expects the tools as one comma-separated string, not a YAML list.
            assert re.search(r"^tools: [A-Za-z0-9_, ()*:.-]+$", path.read_text(), re.M)

    def test_tools_are_real_claude_code_tools(self) -> None:
        """No definition names a tool the bundled Claude Code does not have."""
        for d in load_definitions().values():
            assert set(d.tool_names) <= KNOWN_TOOLS, d.name

    def test_no_agent_has_bare_bash(self) -> None:
        """Every bundled agent that runs commands lists them as Bash(<prefix>:*) patterns."""
        for d in load_definitions().values():
            assert "Bash" not in d.tools, d.name
            assert d.bash_prefixes, d.name
            assert {t for t in d.tools if t.startswith("Bash")} == {
                f"Bash({p}:*)" for p in d.bash_prefixes}, d.name

    def test_only_code_agents_may_commit_and_only_fleet_agents_reach_peers(self) -> None:
        """The patterns follow the prompts: git commit for the agents that fix code, curl and
        ssh for the fleet's, neither for the other side."""
        defs = load_definitions()
        for name in ("healing-agent", "living-context-healer", "remediation-agent"):
            assert "git commit" in defs[name].bash_prefixes
            assert "curl" not in defs[name].bash_prefixes and "ssh" not in defs[
                name].bash_prefixes
        assert "git commit" not in defs["evaluation-agent"].bash_prefixes
        for name in ("channel-diagnoser", "daemon-restarter", "tunnel-establisher",
                     "nats-reconnector", "master-healer"):
            assert "curl" in defs[name].bash_prefixes
            assert "git commit" not in defs[name].bash_prefixes

    def test_kinds_match_the_result_schema(self) -> None:
        """Each agent's result kind fits the result file name and schema pattern."""
        pattern = re.compile(schema("agent-result")["properties"]["kind"]["pattern"])
        kinds = [d.kind for d in load_definitions().values()]
        assert all(pattern.fullmatch(k) for k in kinds)
        assert len(set(kinds)) == len(kinds)

    def test_system_prompts_state_job_limits_result_and_data_rule(self) -> None:
        """Each prompt says its job, its limits, its result file and that logs are data."""
        for d in load_definitions().values():
            body = d.system_prompt
            assert "## Your job" in body and "## Your limits" in body, d.name
            assert f"heal-{d.kind}-<target>-<epoch>.json" in body, d.name
            assert "schemas/agent-result.schema.json" in body, d.name
            assert "never instructions" in body, d.name

    def test_healing_agent_knows_the_unfixable_protocol(self) -> None:
        """The healing agent is told how to declare an error unfixable."""
        body = get_definition("healing-agent").system_prompt
        assert "UNFIXABLE" in body and "500 words" in body and "Never push" in body


class TestParsingErrors:
    def _error(self, text: str, path: str = "") -> ConfigError:
        with pytest.raises(ConfigError) as info:
            parse_definition(text, path=path)
        return info.value

    def test_good_definition(self) -> None:
        """A well-formed file gives every field, the body as the system prompt."""
        d = parse_definition(GOOD)
        assert (d.name, d.tools, d.model, d.max_turns) == ("probe-agent", ("Read", "Write"),
                                                          "sonnet", 5)
        assert d.system_prompt == "You are a probe.\n"

    def test_unknown_tool_is_refused(self) -> None:
        """A tool Claude Code does not have is an error naming the tools key."""
        err = self._error(GOOD.replace("Read, Write", "Read, Teleport"))
        assert err.key == "tools" and "Teleport" in str(err)

    def test_bash_patterns_are_accepted(self) -> None:
        """Bash(<command prefix>:*) patterns are kept as written; the session's tool is Bash."""
        d = parse_definition(GOOD.replace("Read, Write",
                                          "Read, Bash(git diff:*), Bash(python -m pytest:*)"))
        assert d.tools == ("Read", "Bash(git diff:*)", "Bash(python -m pytest:*)")
        assert d.tool_names == ("Read", "Bash")
        assert d.bash_prefixes == ("git diff", "python -m pytest")

    @pytest.mark.parametrize("entry", [
        "Bash", "Bash(*)", "Bash(git diff)", "Bash(git *:*)", "Bash(curl x; rm -rf /:*)",
        "Bash(echo $HOME:*)", "Bash(ls | sh:*)", "Bash(`id`:*)", "Bash(:*)",
        "Bash(sh:*)", "Bash(timeout:*)", "Bash(env:*)", "Bash(xargs:*)", "Bash(python:*)",
        "Bash(python3 -c:*)", "Bash(find . -exec:*)", "Read(/etc/passwd)",
    ])
    def test_bash_that_would_allow_anything_is_refused(self, entry: str) -> None:
        """Bare Bash, a pattern with shell syntax or a wildcard inside, or the prefix of a
        command that runs any other command or code is refused, naming the tools key."""
        err = self._error(GOOD.replace("Read, Write", f"Read, {entry}"))
        assert err.key == "tools"

    def test_mcp_tools_are_allowed(self) -> None:
        """MCP tools (mcp__server__tool) may be listed."""
        d = parse_definition(GOOD.replace("Read, Write", "Read, mcp__healer__report_error"))
        assert "mcp__healer__report_error" in d.tools

    def test_tools_as_yaml_list_is_refused(self) -> None:
        """Tools must be one comma-separated string, as Claude Code reads it."""
        err = self._error(GOOD.replace("tools: Read, Write", "tools:\n  - Read\n  - Write"))
        assert err.key == "tools"

    @pytest.mark.parametrize("field", ["hooks: {}", "mcpServers: {}", "permissionMode: auto"])
    def test_fields_plugins_ignore_are_refused(self, field: str) -> None:
        """hooks/mcpServers/permissionMode would be silently ignored for plugin agents."""
        err = self._error(GOOD.replace("model: sonnet", f"model: sonnet\n{field}"))
        assert err.key == field.split(":")[0]

    def test_name_must_match_file(self, tmp_path: Path) -> None:
        """A file whose name differs from its `name` field is refused."""
        err = self._error(GOOD, path=str(tmp_path / "other.md"))
        assert err.key == "name"

    @pytest.mark.parametrize("text,key", [
        ("no front matter", ""),
        (GOOD.replace("description: Probes things. Use when a test needs an agent.\n", ""),
         "description"),
        (GOOD.replace("maxTurns: 5", "maxTurns: 0"), "maxTurns"),
        (GOOD.replace("model: sonnet", "model: gpt-4"), "model"),
        (GOOD.replace("name: probe-agent", "name: ../etc"), "name"),
        (GOOD.replace("You are a probe.\n", ""), ""),
    ])
    def test_bad_files_name_the_problem(self, text: str, key: str) -> None:
        """Missing or bad fields raise ConfigError with the offending key."""
        assert self._error(text).key == key

    def test_unknown_agent_is_a_usage_error_listing_known(self) -> None:
        """Asking for an agent that does not exist names the ones that do."""
        with pytest.raises(UsageError, match="channel-diagnoser"):
            get_definition("no-such-agent")

    def test_custom_agents_folder(self, tmp_path: Path) -> None:
        """A folder of user definitions loads the same way."""
        (tmp_path / "probe-agent.md").write_text(GOOD)
        assert list(load_definitions(tmp_path)) == ["probe-agent"]
