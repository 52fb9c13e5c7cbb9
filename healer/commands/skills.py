"""``healer skills list|install|uninstall|validate``: the Agent Skills of the bundle."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from healer.commands._common import parser, print_json, run

HELP = "install healer's Agent Skills for Claude Code, or check them (install, validate, list)"

EPILOG = """\
examples:
  healer skills list                      the bundle's skills and whether they are installed
  healer skills install                   into ~/.claude/skills (or $CLAUDE_CONFIG_DIR/skills)
  healer skills install --project         into .claude/skills of the current git repository
  healer skills install --target DIR --only self-healing
  healer skills uninstall                 remove healer's copies (other skills stay)
  healer skills validate --json           frontmatter, sizes, references, scripts, plugin

The root SKILL.md installs as the skill 'healer-bundle'; skills/<name>/ as '<name>'. As a
Claude Code plugin (claude --plugin-dir . / a marketplace) the same four load as healer:<name>.

exit codes: 0 ok · 1 validate found problems, or install/uninstall met a skill of the same
name that healer did not install (nothing was changed; --force replaces it) · 2 usage error"""


def _target_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--target", metavar="DIR",
                       help="skills folder (default ~/.claude/skills or $CLAUDE_CONFIG_DIR/skills)")
    where.add_argument("--project", action="store_true",
                       help="the current git repository's .claude/skills")
    p.add_argument("--only", metavar="NAME", action="append", default=[],
                   help="just this skill (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _build() -> argparse.ArgumentParser:
    p = parser("skills", "Install healer's Agent Skills where Claude Code finds them, and check "
                         "them.", EPILOG)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the bundle's skills and where they are installed")
    _target_args(ls)
    ins = sub.add_parser("install", help="copy the skills into a skills folder (idempotent)")
    _target_args(ins)
    ins.add_argument("--force", action="store_true",
                     help="replace a skill of the same name that healer did not install")
    ins.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    un = sub.add_parser("uninstall", help="remove healer's installed copies")
    _target_args(un)
    un.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    val = sub.add_parser("validate", help="check frontmatter, sizes, references, scripts, plugin")
    val.add_argument("path", nargs="?", help="a bundle, one skill, or a folder of skills "
                                             "(default: healer's bundle)")
    val.add_argument("--no-scripts", action="store_true", help="do not run the scripts' --help")
    val.add_argument("--json", action="store_true", help="print JSON")
    return p


def _selected(args: argparse.Namespace) -> list[Any]:
    from healer.errors import UsageError
    from healer.skills import bundle_skills

    skills = bundle_skills()
    if not skills:
        raise UsageError("no skills found in the bundle")
    if args.only:
        names = {s.name for s in skills}
        unknown = sorted(set(args.only) - names)
        if unknown:
            raise UsageError(f"unknown skill {', '.join(unknown)}; the bundle has "
                             f"{', '.join(sorted(names))}")
        skills = [s for s in skills if s.name in args.only]
    return skills


def _target(args: argparse.Namespace) -> Path:
    from healer.skills import project_target, user_target

    if args.project:
        return project_target()
    return Path(args.target).expanduser() if args.target else user_target()


def _list(args: argparse.Namespace) -> int:
    from healer.skills import read_marker, split_front_matter

    target = _target(args)
    rows = []
    for s in _selected(args):
        dest = target / s.name
        try:
            desc = str(split_front_matter(s.skill_md.read_text(encoding="utf-8"))[0]
                       .get("description", ""))
        except (OSError, ValueError):
            desc = ""
        marker = read_marker(dest) if dest.is_dir() else None
        if not dest.exists():
            state = "not installed"
        elif marker is None:
            state = "foreign"
        else:
            state = "installed" if marker.get("digest") == s.digest() else "outdated"
        rows.append({"name": s.name, "source": str(s.path), "dest": str(dest),
                     "state": state, "description": desc})
    if args.json:
        print_json({"target": str(target), "skills": rows})
    else:
        print(f"skills folder: {target}")
        for r in rows:
            print(f"  {r['name']:<15} {r['state']:<14} {' '.join(r['description'].split())[:70]}")
    return 0


def _apply(args: argparse.Namespace) -> int:
    from healer.skills import install, uninstall

    target = _target(args)
    skills = _selected(args)
    if args.action == "install":
        actions = install(skills, target, force=args.force, dry_run=args.dry_run)
    else:
        actions = uninstall(skills, target, dry_run=args.dry_run)
    conflict = any(a.action == "conflict" for a in actions)
    changed = not args.dry_run and not (conflict and args.action == "install")
    if args.json:
        print_json({"target": str(target), "dry_run": args.dry_run, "changed": changed,
                    "skills": [a.as_dict() for a in actions]})
    else:
        for a in actions:
            verb = f"would be {a.action}" if args.dry_run and a.action not in (
                "unchanged", "absent", "conflict") else a.action
            print(f"{a.name:<15} {verb:<20} {a.dest}" + (f"  ({a.reason})" if a.reason else ""))
        if conflict and args.action == "install":
            print("nothing was changed: resolve the conflicts or pass --force")
    return 1 if conflict else 0


def _validate(args: argparse.Namespace) -> int:
    from healer.resources import bundle_root
    from healer.skills import check_plugin, check_skill, skills_at

    root = Path(args.path) if args.path else bundle_root()
    reports = [check_skill(s, run_scripts=not args.no_scripts) for s in skills_at(root)]
    names = [r.name for r in reports]
    for r in reports:
        if names.count(r.name) > 1:
            r.errors.append(f"two skills are named {r.name!r}")
    plugin = check_plugin(root) if (root / ".claude-plugin" / "plugin.json").is_file() else None
    ok = all(r.ok for r in reports) and (plugin is None or plugin.ok)
    if args.json:
        print_json({"ok": ok, "path": str(root), "skills": [r.as_dict() for r in reports],
                    "plugin": plugin.as_dict() if plugin else None})
        return 0 if ok else 1
    for r in [*reports, *([plugin] if plugin else [])]:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.name:<15} {r.path}")
        for e in r.errors:
            print(f"     error: {e}")
        for w in r.warnings:
            print(f"     warning: {w}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    args = _build().parse_args(argv)

    def body() -> int:
        if args.action == "list":
            return _list(args)
        if args.action == "validate":
            return _validate(args)
        return _apply(args)

    return run(body)
