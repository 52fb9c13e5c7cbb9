"""The skill bundle: find healer's Agent Skills, check them, install them where Claude Code looks.

The bundle has four skills. ``skills/<name>/`` holds three (``healer``, ``fleet-healer``,
``self-healing``), each a folder with ``SKILL.md`` and optional ``references/`` and
``scripts/``. The repository's root ``SKILL.md`` is the fourth, the entry skill; it installs as
a folder named ``healer-bundle`` (its ``name``), because a skill's name must equal its folder's.

How each way of installing loads them:

- **Claude Code plugin** (``.claude-plugin/plugin.json``, ``"skills": ["./skills/", "./"]``):
  all four, namespaced ``healer:<name>``.
- **``healer skills install``**: copies all four into ``~/.claude/skills`` (or
  ``$CLAUDE_CONFIG_DIR/skills``), ``--project`` into ``<repo>/.claude/skills``, ``--target``
  anywhere. Each copy carries a ``.healer-skill.json`` marker, so a re-install updates healer's
  own copies and refuses to replace a folder of the same name that someone else put there.

``check_skill`` applies the Agent Skills rules (the ones PyPI ``skills-ref`` checks) plus the
bundle's own: the description says when to use the skill and has no angle brackets, the body
stays under ``MAX_BODY_LINES``, every ``scripts/…``, ``references/…`` and relative link it
mentions exists, and every script is executable and answers ``--help``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from healer import __version__
from healer.core.files import atomic_write_json
from healer.errors import UsageError
from healer.resources import bundle_root

BUNDLE_SKILL = "healer-bundle"
MARKER = ".healer-skill.json"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_BODY_LINES = 500
ALLOWED_FIELDS = frozenset({"name", "description", "license", "allowed-tools", "metadata",
                            "compatibility"})
SCRIPT_TIMEOUT_S = 15.0

_FRONT = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)
# `scripts/x.py` / `references/y.md`, optionally behind ${CLAUDE_SKILL_DIR}/, not inside a
# longer path (so `.claude/skills/healer/scripts` or `scripts/setup.sh` of a repo root would
# need to be written differently on purpose).
_LOCAL_REF = re.compile(r"(?<![\w/.$-])(?:\$\{CLAUDE_SKILL_DIR\}/)?"
                        r"((?:scripts|references)/[A-Za-z0-9_][A-Za-z0-9_.-]*)")
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")
_SKIP_COPY = {"__pycache__", ".DS_Store", MARKER}


# -- discovery ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SkillSource:
    """One skill of a bundle: a folder, or (the entry skill) a lone ``SKILL.md`` file."""

    name: str
    path: Path

    @property
    def skill_md(self) -> Path:
        return self.path if self.path.is_file() else self.path / "SKILL.md"

    @property
    def folder(self) -> Path:
        """Where the skill's relative paths (scripts/, references/) start."""
        return self.path.parent if self.path.is_file() else self.path

    def files(self) -> list[Path]:
        """Every file the skill consists of, relative to ``folder``, sorted."""
        if self.path.is_file():
            return [Path("SKILL.md")]
        out = []
        for p in sorted(self.path.rglob("*")):
            rel = p.relative_to(self.path)
            if any(part in _SKIP_COPY for part in rel.parts) or p.suffix == ".pyc":
                continue
            if p.is_file() and not p.is_symlink():
                out.append(rel)
        return out

    def digest(self) -> str:
        """A hash of the skill's files, their contents and exec bits (what install compares)."""
        return _digest(self.folder, self.files())


def _digest(folder: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for rel in files:
        p = folder / rel
        h.update(rel.as_posix().encode() + b"\0")
        h.update(b"x" if os.access(p, os.X_OK) else b"-")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def bundle_skills(root: Path | None = None) -> list[SkillSource]:
    """The skills of the bundle at ``root`` (default: healer's own), entry skill first."""
    root = Path(root) if root is not None else bundle_root()
    found = []
    if (root / "SKILL.md").is_file():
        found.append(SkillSource(BUNDLE_SKILL, root / "SKILL.md"))
    skills = root / "skills"
    if skills.is_dir():
        for d in sorted(skills.iterdir()):
            if d.is_dir() and (d / "SKILL.md").is_file():
                found.append(SkillSource(d.name, d))
    return found


def skills_at(path: Path) -> list[SkillSource]:
    """What ``healer skills validate PATH`` checks: a bundle, one skill, or a skills folder."""
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory")
    if (path / "skills").is_dir() and any((path / "skills").glob("*/SKILL.md")):
        return bundle_skills(path)
    if (path / "SKILL.md").is_file():
        return [SkillSource(path.resolve().name, path)]
    found = [SkillSource(d.name, d) for d in sorted(path.iterdir())
             if d.is_dir() and (d / "SKILL.md").is_file()]
    if not found:
        raise UsageError(f"{path}: no SKILL.md here or in its sub-folders")
    return found


# -- checks ------------------------------------------------------------------------------------

@dataclass
class Report:
    """What a check found about one thing (a skill, the plugin): errors fail, warnings don't."""

    name: str
    path: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "ok": self.ok, "errors": self.errors,
                "warnings": self.warnings, **self.info}


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """``(front matter, body)`` of a SKILL.md; ValueError when there is no valid front matter."""
    m = _FRONT.match(text)
    if not m:
        raise ValueError("SKILL.md must start with YAML front matter between '---' lines")
    try:
        meta = yaml.safe_load(m.group("yaml"))
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise ValueError("front matter must be a mapping")
    return meta, text[m.end():]


def check_name(name: object, folder: str) -> list[str]:
    """The Agent Skills name rules (as skills-ref applies them), and name == folder."""
    if not isinstance(name, str) or not name.strip():
        return ["'name' must be a non-empty string"]
    name = unicodedata.normalize("NFKC", name.strip())
    errors = []
    if len(name) > MAX_NAME:
        errors.append(f"name {name!r} is longer than {MAX_NAME} characters")
    if name != name.lower():
        errors.append(f"name {name!r} must be lowercase")
    if name.startswith("-") or name.endswith("-") or "--" in name:
        errors.append(f"name {name!r}: no leading, trailing or doubled hyphens")
    if not all(c.isalnum() or c == "-" for c in name):
        errors.append(f"name {name!r}: only letters, digits and hyphens")
    if name != unicodedata.normalize("NFKC", folder):
        errors.append(f"name {name!r} must equal its folder name {folder!r}")
    return errors


def check_description(desc: object) -> list[str]:
    if not isinstance(desc, str) or not desc.strip():
        return ["'description' must be a non-empty string"]
    errors = []
    if len(desc) > MAX_DESCRIPTION:
        errors.append(f"description is {len(desc)} characters (at most {MAX_DESCRIPTION})")
    if "<" in desc or ">" in desc:
        errors.append("description must not contain '<' or '>'")
    if not re.search(r"\bwhen\b", desc, re.I):
        errors.append("description must say when to use the skill ('Use when …')")
    return errors


def _mentions(text: str) -> set[str]:
    found = {m.group(1).rstrip(".") for m in _LOCAL_REF.finditer(text)}
    for m in _LINK.finditer(text):
        target = m.group("target")
        if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("/"):
            found.add(target)
    return found


def check_skill(src: SkillSource, *, run_scripts: bool = True) -> Report:
    """Every rule for one skill; ``run_scripts`` also runs each script's ``--help``."""
    rep = Report(src.name, str(src.path))
    try:
        text = src.skill_md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        rep.errors.append(f"SKILL.md cannot be read: {exc}")
        return rep
    try:
        meta, body = split_front_matter(text)
    except ValueError as exc:
        rep.errors.append(str(exc))
        return rep
    extra = sorted(set(meta) - ALLOWED_FIELDS)
    if extra:
        rep.errors.append(f"front matter fields not in the Agent Skills spec: {', '.join(extra)}")
    rep.errors += check_name(meta.get("name"), src.name)
    rep.errors += check_description(meta.get("description"))
    compat = meta.get("compatibility")
    if compat is not None and (not isinstance(compat, str) or len(compat) > MAX_COMPATIBILITY):
        rep.errors.append(f"'compatibility' must be a string of at most {MAX_COMPATIBILITY} "
                          "characters")
    lines = body.count("\n") + (0 if body.endswith("\n") else 1)
    rep.info.update(description=meta.get("description", ""), body_lines=lines)
    if lines > MAX_BODY_LINES:
        rep.errors.append(f"body is {lines} lines (keep it under {MAX_BODY_LINES}; move long "
                          "tables to references/)")
    _check_references(src, body, rep)
    if run_scripts:
        _check_scripts(src, rep)
    return rep


def _check_references(src: SkillSource, body: str, rep: Report) -> None:
    folder = src.folder
    docs: list[tuple[Path, str]] = [(src.skill_md, body)]
    refs = folder / "references"
    if not src.path.is_file() and refs.is_dir():
        docs += [(p, p.read_text(encoding="utf-8", errors="replace"))
                 for p in sorted(refs.rglob("*.md"))]
    mentioned: set[Path] = set()
    for doc, text in docs:
        for ref in sorted(_mentions(text)):
            where = doc.relative_to(folder)
            if src.path.is_file():
                # The entry skill installs as a lone SKILL.md: nothing beside it to point at.
                rep.errors.append(f"{where} mentions {ref}; the entry skill installs alone, "
                                  "so name other skills instead of linking files")
                continue
            base = folder if ref.startswith(("scripts/", "references/")) else doc.parent
            target = (base / ref).resolve()
            if not target.is_relative_to(folder.resolve()):
                rep.errors.append(f"{where} links {ref}, outside the skill folder (it breaks "
                                  "once the skill is installed)")
            elif not target.exists():
                rep.errors.append(f"{where} mentions {ref}, which does not exist")
            mentioned.add(target)
    if not src.path.is_file():
        for sub in ("references", "scripts"):
            for p in sorted((folder / sub).glob("*")) if (folder / sub).is_dir() else []:
                if p.is_file() and p.resolve() not in mentioned and not p.name.startswith(
                        ("_", ".")):
                    rep.warnings.append(f"{sub}/{p.name} is not mentioned by SKILL.md or a "
                                        "reference")


def _check_scripts(src: SkillSource, rep: Report) -> None:
    from healer.core.proc import run

    scripts = src.folder / "scripts"
    if src.path.is_file() or not scripts.is_dir():
        return
    for p in sorted(scripts.iterdir()):
        if not p.is_file() or p.name.startswith(("_", ".")) or p.suffix == ".pyc":
            continue
        name = f"scripts/{p.name}"
        if not os.access(p, os.X_OK):
            rep.errors.append(f"{name} is not executable (chmod +x)")
            continue
        with p.open("rb") as fh:
            if fh.read(2) != b"#!":
                rep.errors.append(f"{name} has no #! line")
                continue
        try:
            # No __pycache__ left in the skill folder (it may be an installed copy).
            res = run([str(p.resolve()), "--help"], timeout=SCRIPT_TIMEOUT_S,
                      cwd=src.folder.resolve(), env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        except OSError as exc:  # e.g. the #! interpreter does not exist
            rep.errors.append(f"{name} cannot be started: {exc}")
            continue
        if not res.ok or not res.stdout.strip():
            why = "timed out" if res.timed_out else f"exit {res.returncode}"
            rep.errors.append(f"{name} --help failed ({why}): {res.stderr.strip()[-300:]}")


def check_plugin(root: Path) -> Report:
    """The plugin manifest, marketplace, hooks, MCP config and agents, as Claude Code reads them.

    A quick local mirror of ``claude plugin validate`` for machines without the CLI.
    """
    from healer.agents.definitions import load_definitions
    from healer.errors import ConfigError

    rep = Report("plugin", str(root))
    manifest = _json(root / ".claude-plugin" / "plugin.json", rep)
    if manifest is None:
        return rep
    name = manifest.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name):
        rep.errors.append("plugin.json: 'name' must be kebab-case")
    for key in ("version", "description", "author", "license"):
        if key not in manifest:
            rep.warnings.append(f"plugin.json: no '{key}'")
    rep.info["plugin"] = name
    market = root / ".claude-plugin" / "marketplace.json"
    if market.exists() and (data := _json(market, rep)) is not None:
        for entry in data.get("plugins", []):
            source = entry.get("source") if isinstance(entry, dict) else None
            if isinstance(source, str) and not (root / source / ".claude-plugin" /
                                                "plugin.json").is_file():
                rep.errors.append(f"marketplace.json: plugin source {source!r} has no "
                                  ".claude-plugin/plugin.json")
    mcp = manifest.get("mcpServers", ".mcp.json")
    for path in [mcp] if isinstance(mcp, str) else []:
        if (data := _json(root / path, rep)) is not None:
            for srv, spec in (data.get("mcpServers") or {}).items():
                _check_command(root, f"{path}: server {srv}", spec.get("command", ""), rep)
    hooks = manifest.get("hooks", "hooks/hooks.json")
    if isinstance(hooks, str) and (root / hooks).exists() and (
            data := _json(root / hooks, rep)) is not None:
        for event, groups in (data.get("hooks") or {}).items():
            for group in groups:
                for hook in group.get("hooks", []):
                    if hook.get("type") == "command":
                        cmd = str(hook.get("command", "")).split(" ", 1)[0].strip('"')
                        _check_command(root, f"{hooks}: {event}", cmd, rep)
    try:
        rep.info["agents"] = sorted(load_definitions(root / "agents")) if (
            root / "agents").is_dir() else []
    except ConfigError as exc:
        rep.errors.append(f"agents: {exc}")
    return rep


def _json(path: Path, rep: Report) -> Any:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        rep.errors.append(f"{path.name}: {exc}")
        return None
    if not isinstance(data, dict):
        rep.errors.append(f"{path.name}: must be a JSON object")
        return None
    return data


def _check_command(root: Path, where: str, command: str, rep: Report) -> None:
    prefix = "${CLAUDE_PLUGIN_ROOT}/"
    if command.startswith(prefix):
        target = root / command[len(prefix):]
        if not target.is_file() or not os.access(target, os.X_OK):
            rep.errors.append(f"{where}: {command} is not an executable file in the plugin")


# -- install -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Action:
    """What install/uninstall does (or did) to one skill folder."""

    name: str
    dest: Path
    action: str  # installed | updated | unchanged | removed | absent | conflict
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dest": str(self.dest), "action": self.action,
                **({"reason": self.reason} if self.reason else {})}


def user_target() -> Path:
    """Claude Code's personal skills folder (``$CLAUDE_CONFIG_DIR`` or ``~/.claude``)/skills."""
    config = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(config).expanduser() if config else Path.home() / ".claude") / "skills"


def project_target(start: Path | None = None) -> Path:
    """``.claude/skills`` of the git repository holding ``start`` (else of ``start`` itself)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d / ".claude" / "skills"
    return here / ".claude" / "skills"


def read_marker(dest: Path) -> dict[str, Any] | None:
    """healer's marker in an installed skill folder, or None (not ours, or unreadable)."""
    try:
        data = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("installed_by") == "healer" else None


def _installed_digest(dest: Path) -> str | None:
    try:
        return _digest(dest, SkillSource(dest.name, dest).files())
    except OSError:
        return None


def plan_install(skills: list[SkillSource], target: Path, *, force: bool = False) -> list[Action]:
    """What ``install`` would do, without touching anything."""
    actions = []
    for src in skills:
        dest = target / src.name
        if not dest.exists() and not dest.is_symlink():
            actions.append(Action(src.name, dest, "installed"))
        elif dest.is_dir() and not dest.is_symlink() and read_marker(dest) is not None:
            same = _installed_digest(dest) == src.digest()
            actions.append(Action(src.name, dest, "unchanged" if same else "updated"))
        elif force:
            actions.append(Action(src.name, dest, "updated", "replaced a foreign skill (--force)"))
        else:
            actions.append(Action(src.name, dest, "conflict",
                                  "a skill of this name that healer did not install is there; "
                                  "use --force to replace it"))
    return actions


def install(skills: list[SkillSource], target: Path, *, force: bool = False,
            dry_run: bool = False) -> list[Action]:
    """Copy ``skills`` into ``target``; all or nothing when a foreign skill is in the way."""
    target = Path(target).expanduser()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: exists and is not a directory")
    actions = plan_install(skills, target, force=force)
    if dry_run or any(a.action == "conflict" for a in actions):
        return actions
    target.mkdir(parents=True, exist_ok=True)
    _sweep(target)
    by_name = {s.name: s for s in skills}
    for a in actions:
        if a.action != "unchanged":
            _replace(by_name[a.name], a.dest)
    return actions


def _replace(src: SkillSource, dest: Path) -> None:
    """Build the new copy beside ``dest``, then swap it in with two renames."""
    tmp = dest.parent / f".{dest.name}.healer-tmp-{os.getpid()}"
    old = dest.parent / f".{dest.name}.healer-old-{os.getpid()}"
    _remove(tmp)
    tmp.mkdir()
    for rel in src.files():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src.folder / rel, tmp / rel)
    atomic_write_json(tmp / MARKER, {"installed_by": "healer", "version": __version__,
                                     "skill": src.name, "source": str(src.path),
                                     "digest": src.digest()})
    if dest.exists() or dest.is_symlink():
        _remove(old)
        os.replace(dest, old)
    os.replace(tmp, dest)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _sweep(target: Path) -> None:
    """Leftovers of an install that was killed between its renames."""
    for p in target.glob(".*.healer-*-*"):
        with contextlib.suppress(OSError):
            _remove(p)


def uninstall(skills: list[SkillSource], target: Path, *, dry_run: bool = False) -> list[Action]:
    """Remove healer's copies of ``skills`` from ``target``; foreign folders stay."""
    actions = []
    for src in skills:
        dest = Path(target).expanduser() / src.name
        if not dest.exists() and not dest.is_symlink():
            actions.append(Action(src.name, dest, "absent"))
        elif dest.is_dir() and not dest.is_symlink() and read_marker(dest) is not None:
            if not dry_run:
                _remove(dest)
            actions.append(Action(src.name, dest, "removed"))
        else:
            actions.append(Action(src.name, dest, "conflict",
                                  "not installed by healer; left alone"))
    return actions
