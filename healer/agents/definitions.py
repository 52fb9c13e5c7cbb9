"""Agent definitions: ``agents/*.md`` in Claude Code's subagent format.

Each file is YAML front matter (``name``, ``description``, ``tools`` as one comma-separated
string, ``model``, optional ``maxTurns``) and a Markdown body, the agent's system prompt.
``Bash`` is never listed bare: an agent that runs commands lists each command prefix its
prompt tells it to run as ``Bash(<command prefix>:*)`` (``Bash(git diff:*)``,
``Bash(curl:*)``), and the Claude executor lets nothing else run. A prefix is plain words
(no shell metacharacters, no wildcard inside), and never a command that runs another
command (``sh``, ``env``, ``timeout``, ``xargs`` …), which would allow anything. The
same files are what Claude Code loads from the skill bundle and what healer's executors run,
so both see one definition. Fields Claude Code ignores for plugin agents (hooks, mcpServers,
permissionMode) are refused here rather than silently trusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from healer.errors import ConfigError, UsageError
from healer.resources import bundle_path

# The built-in tools of the Claude Code CLI bundled with claude-agent-sdk (2.1.x) an agent
# may name. A test runs the real CLI with every definition's tools and checks it offers them.
KNOWN_TOOLS = frozenset({
    "Agent", "Bash", "Edit", "Glob", "Grep", "Monitor", "NotebookEdit", "Read", "Skill",
    "Task", "TaskStop", "ToolSearch", "WebFetch", "WebSearch", "Write",
})
_MCP_TOOL = re.compile(r"mcp__[A-Za-z0-9_-]{1,64}__[A-Za-z0-9_-]{1,64}")
_BASH_PATTERN = re.compile(
    r"Bash\((?P<prefix>[A-Za-z0-9._/@=+-]+(?: [A-Za-z0-9._/@=+,-]+)*):\*\)")
_CODE_FLAGS = frozenset({"-c", "-e", "--eval", "-exec", "--exec"})
# Commands that run whatever command or code follows them: alone (``Bash(timeout:*)``), or
# with a code flag (``Bash(python -c:*)``), a prefix of theirs would allow anything.
RUNS_ANY = frozenset({
    "bash", "sh", "dash", "zsh", "env", "exec", "eval", "command", "builtin", "timeout",
    "nice", "nohup", "setsid", "xargs", "sudo", "su", "doas", "chroot", "unshare", "nsenter",
    "find", "awk", "perl", "ruby", "node", "python", "python3", "watch", "script", "strace",
    "time", "flock", "stdbuf", "busybox", "ssh-agent", "parallel",
})
_AGENT_NAME = re.compile(r"[a-z][a-z0-9-]{1,63}")
_MODELS = {"sonnet", "opus", "haiku", "inherit"}
_MODEL_ID = re.compile(r"claude-[a-z0-9.-]{1,60}")
_ALLOWED_KEYS = {"name", "description", "tools", "model", "maxTurns", "color"}
_IGNORED_BY_PLUGINS = {"hooks", "mcpServers", "permissionMode"}

# What each bundled agent reports as: the ``kind`` of its result file name.
RESULT_KINDS = {
    "channel-diagnoser": "diagnose",
    "daemon-restarter": "daemon",
    "tunnel-establisher": "tunnel",
    "config-updater": "config",
    "nats-reconnector": "nats",
    "inbox-repairer": "inbox",
    "master-healer": "fleet",
    "evaluation-agent": "evaluation",
    "remediation-agent": "remediation",
    "healing-agent": "healing",
    "living-context-healer": "context",
}


def is_known_tool(name: str) -> bool:
    """A built-in Claude Code tool, or an MCP tool ``mcp__<server>__<tool>``."""
    return name in KNOWN_TOOLS or bool(_MCP_TOOL.fullmatch(name))


def tool_name(entry: str) -> str:
    """The tool an entry of ``tools`` is about: ``Bash(git diff:*)`` → ``Bash``."""
    return entry.split("(", 1)[0]


def bash_prefix(entry: str) -> str | None:
    """The command prefix of a ``Bash(<prefix>:*)`` entry (None for any other entry)."""
    m = _BASH_PATTERN.fullmatch(entry)
    return m["prefix"] if m else None


def _check_tool(tool: str, where: str) -> None:
    if tool == "Bash":
        raise ConfigError("bare Bash would allow any command: list the commands the agent "
                          "runs as Bash(<command prefix>:*)", file=where, key="tools",
                          expected="e.g. Bash(git diff:*), Bash(pytest:*)")
    if tool.startswith("Bash("):
        prefix = bash_prefix(tool)
        if prefix is None:
            raise ConfigError(f"{tool!r} is not a Bash(<command prefix>:*) pattern of plain "
                              "words", file=where, key="tools", expected="e.g. Bash(git diff:*)")
        words = prefix.split(" ")
        if words[0] in RUNS_ANY and (len(words) == 1 or _CODE_FLAGS & set(words)):
            raise ConfigError(f"{tool!r}: {words[0]} runs any command or code given to it, so "
                              "this pattern would allow anything", file=where, key="tools",
                              expected="a narrower prefix, e.g. Bash(python -m pytest:*)")
        return
    if not is_known_tool(tool):
        raise ConfigError(f"{tool!r} is not a Claude Code tool", file=where, key="tools",
                          expected=", ".join(sorted(KNOWN_TOOLS - {"Bash"}))
                          + ", Bash(<command prefix>:*) or mcp__server__tool")


def result_kind(agent: str) -> str:
    """The result ``kind`` an agent reports as (its name made schema-safe if not bundled)."""
    if agent in RESULT_KINDS:
        return RESULT_KINDS[agent]
    return re.sub(r"[^a-z0-9_]", "_", agent.lower())[:32] or "agent"


@dataclass(frozen=True)
class AgentDefinition:
    """One agent: who it is, what it may use, and its system prompt."""

    name: str
    description: str
    tools: tuple[str, ...]
    model: str
    system_prompt: str
    max_turns: int | None = None
    path: str = ""

    @property
    def kind(self) -> str:
        return result_kind(self.name)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The tools the session has (``Bash`` once for all its patterns)."""
        return tuple(dict.fromkeys(tool_name(t) for t in self.tools))

    @property
    def bash_prefixes(self) -> tuple[str, ...]:
        """The command prefixes the agent may run with Bash."""
        return tuple(p for t in self.tools if (p := bash_prefix(t)) is not None)

    @property
    def template(self) -> str:
        """The task-prompt template this agent is given (``prompts/<name>.md.j2``)."""
        return f"{self.name}.md.j2"


_FRONT = re.compile(r"\A---[ \t]*\n(?P<meta>.*?)\n---[ \t]*\n(?P<body>.*)\Z", re.S)


def parse_definition(text: str, *, path: str = "") -> AgentDefinition:
    """Parse one agent file; a bad file raises ``ConfigError`` naming the key."""
    where = path or "agent definition"
    m = _FRONT.match(text)
    if not m:
        raise ConfigError("no YAML front matter (--- … ---) at the top", file=where)
    try:
        meta = yaml.safe_load(m["meta"])
    except yaml.YAMLError as exc:
        raise ConfigError(f"front matter is not valid YAML: {exc}", file=where) from exc
    if not isinstance(meta, dict):
        raise ConfigError("front matter must be a mapping", file=where)
    for key in meta:
        if key in _IGNORED_BY_PLUGINS:
            raise ConfigError("Claude Code ignores this field for plugin agents; do not rely "
                              "on it", file=where, key=str(key))
        if key not in _ALLOWED_KEYS:
            raise ConfigError("unknown field", file=where, key=str(key),
                              expected=", ".join(sorted(_ALLOWED_KEYS)))
    name = meta.get("name")
    if not isinstance(name, str) or not _AGENT_NAME.fullmatch(name):
        raise ConfigError("must be lowercase letters, digits and hyphens", file=where,
                          key="name", expected="e.g. channel-diagnoser")
    if path and Path(path).stem != name:
        raise ConfigError(f"name {name!r} differs from the file name", file=where, key="name")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError("missing", file=where, key="description")
    raw_tools = meta.get("tools")
    if not isinstance(raw_tools, str):
        raise ConfigError("must be one comma-separated string (Claude Code's format)",
                          file=where, key="tools", expected="e.g. Read, Write, Bash")
    tools = tuple(t.strip() for t in raw_tools.split(",") if t.strip())
    if not tools:
        raise ConfigError("an agent needs at least one tool", file=where, key="tools")
    for tool in tools:
        _check_tool(tool, where)
    if len(set(tools)) != len(tools):
        raise ConfigError("a tool is listed twice", file=where, key="tools")
    model = meta.get("model", "inherit")
    if not isinstance(model, str) or not (model in _MODELS or _MODEL_ID.fullmatch(model)):
        raise ConfigError("unknown model", file=where, key="model",
                          expected="sonnet, opus, haiku, inherit or a claude-… model id")
    max_turns = meta.get("maxTurns")
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                  or not 1 <= max_turns <= 500):
        raise ConfigError("must be an integer 1-500", file=where, key="maxTurns")
    body = m["body"].strip()
    if not body:
        raise ConfigError("the system prompt (the body after the front matter) is empty",
                          file=where)
    return AgentDefinition(name=name, description=" ".join(description.split()), tools=tools,
                           model=model, system_prompt=body + "\n", max_turns=max_turns,
                           path=path)


def agents_dir() -> Path:
    return bundle_path("agents")


def load_definitions(folder: Path | str | None = None) -> dict[str, AgentDefinition]:
    """Every ``*.md`` definition in ``folder`` (default: the bundle's ``agents/``), by name."""
    root = Path(folder) if folder is not None else agents_dir()
    if folder is None:
        return dict(_load_cached(str(root)))
    return _load(root)


@cache
def _load_cached(root: str) -> dict[str, AgentDefinition]:
    return _load(Path(root))


def _load(root: Path) -> dict[str, AgentDefinition]:
    if not root.is_dir():
        raise ConfigError("agents folder not found", file=str(root))
    found: dict[str, AgentDefinition] = {}
    for path in sorted(root.glob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read: {exc}", file=str(path)) from exc
        definition = parse_definition(text, path=str(path))
        found[definition.name] = definition
    return found


def get_definition(name: str, folder: Path | str | None = None) -> AgentDefinition:
    """The definition called ``name``; an unknown name is a usage error listing the known."""
    definitions = load_definitions(folder)
    if name not in definitions:
        known = ", ".join(sorted(definitions)) or "none"
        raise UsageError(f"unknown agent {name!r} (known: {known})")
    return definitions[name]
