"""Seed files: Markdown messages with YAML front matter that people and peers read.

    .fleet-messages/<to>/<YYYYmmdd-HHMMSS>-from-<node>.md

The front matter (``schemas/seed-file.schema.json``) says who, to whom, what about; the body is
Markdown a person can act on without other context. Human escalations go to ``human/``.
Handled files move to ``<to>/archive/``. Two files from one node in one second get ``-2``,
``-3`` … after the time stamp, so nothing is overwritten. Every folder is opened with
``healer.core.safedirs`` (no symlink followed, private, healer's own): a ``human/`` planted as
a symlink gets ``UnsafeDirError``, and nothing is written through it.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from healer.core import safedirs
from healer.core.names import safe_name
from healer.core.schemas import errors as schema_errors
from healer.errors import RejectedFile

HUMAN = "human"
MAX_SEED_BYTES = 256 * 1024
NAME_RE = re.compile(
    r"(?P<ts>\d{8}-\d{6})(?:-(?P<seq>\d{1,4}))?"
    r"-from-(?P<node>[A-Za-z0-9][A-Za-z0-9._-]{0,127})\.md"
)
_FRONT = re.compile(r"\A---\r?\n(?P<yaml>.*?)\r?\n---\r?\n?(?P<body>.*)\Z", re.S)


@dataclass(frozen=True)
class Seed:
    """One seed message."""

    sender: str
    to: str
    subject: str
    body: str
    timestamp: str = ""
    type: str = "message"
    severity: str = "info"
    incident: str = ""
    id: str = ""
    path: Path | None = field(default=None, compare=False)

    def front_matter(self) -> dict[str, Any]:
        fm: dict[str, Any] = {
            "from": self.sender,
            "to": self.to,
            "subject": self.subject,
            "timestamp": self.timestamp or now_iso(),
            "type": self.type,
            "severity": self.severity,
        }
        if self.incident:
            fm["incident"] = self.incident
        if self.id:
            fm["id"] = self.id
        return fm


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(seed: Seed) -> str:
    """The file text: front matter, a title, the body."""
    fm = seed.front_matter()
    problems = schema_errors("seed-file", fm)
    if problems:
        key, message = problems[0]
        raise RejectedFile(f"seed front matter: {key}: {message}")
    head = yaml.safe_dump(fm, sort_keys=False, allow_unicode=True, width=1000).strip()
    body = seed.body.rstrip() + "\n"
    if not body.lstrip().startswith("#"):
        body = f"# {seed.subject}\n\n{body}"
    return f"---\n{head}\n---\n\n{body}"


def write(fleet_dir: Path | str, seed: Seed, *, clock: float | None = None) -> Path:
    """Write ``seed`` into ``<fleet_dir>/<to>/``; never overwrites another file."""
    safe_name(seed.to, "seed recipient")
    safe_name(seed.sender, "seed sender")
    text = render(seed).encode()
    folder = Path(fleet_dir) / seed.to
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if clock is None else clock))
    with safedirs.opened(fleet_dir, seed.to) as fd:
        for seq in range(1, 10000):
            middle = stamp if seq == 1 else f"{stamp}-{seq}"
            name = f"{middle}-from-{seed.sender}.md"
            if _create(fd, name, text):
                return folder / name
    raise RejectedFile(f"too many seed files from {seed.sender} in one second")


def _create(dir_fd: int, name: str, data: bytes) -> bool:
    """Create ``name`` whole or not at all: written to a temp name, then linked (which fails
    if the name is taken), so a reader never sees half a seed."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    if not safedirs.create_file(dir_fd, tmp, data, mode=0o644):
        return False
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp, dir_fd=dir_fd)
    return True


def parse(text: str, *, path: Path | None = None) -> Seed:
    """Parse seed file text; ``RejectedFile`` with the reason if it is not a valid seed."""
    m = _FRONT.match(text)
    if not m:
        raise RejectedFile("no YAML front matter (the file must start with ---)")
    try:
        fm = yaml.safe_load(m.group("yaml"))
    except yaml.YAMLError as exc:
        raise RejectedFile(f"front matter is not valid YAML: {exc}") from exc
    if not isinstance(fm, dict):
        raise RejectedFile("front matter must be a mapping")
    # YAML turns an unquoted ISO time into a datetime; the contract is a string.
    if isinstance(fm.get("timestamp"), datetime):
        fm["timestamp"] = fm["timestamp"].strftime("%Y-%m-%dT%H:%M:%SZ")
    problems = schema_errors("seed-file", fm)
    if problems:
        key, message = problems[0]
        raise RejectedFile(f"front matter {key}: {message}" if key else message)
    return Seed(
        sender=fm["from"], to=fm["to"], subject=fm["subject"], body=m.group("body").lstrip("\n"),
        timestamp=fm["timestamp"], type=fm.get("type", "message"),
        severity=fm.get("severity", "info"), incident=fm.get("incident", ""),
        id=fm.get("id", ""), path=path,
    )


def read(path: Path | str) -> Seed:
    path = Path(path)
    if not NAME_RE.fullmatch(path.name):
        raise RejectedFile("name is not <YYYYmmdd-HHMMSS>-from-<node>.md")
    st = path.lstat()
    if not path.is_file() or path.is_symlink():
        raise RejectedFile("not a regular file")
    if st.st_size > MAX_SEED_BYTES:
        raise RejectedFile(f"larger than {MAX_SEED_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RejectedFile("not UTF-8 text") from exc
    return parse(text, path=path)


def inbox(fleet_dir: Path | str, to: str) -> list[Path]:
    """Unhandled seed files addressed to ``to``, oldest first."""
    folder = Path(fleet_dir) / safe_name(to, "seed recipient")
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [folder / n for n in sorted(names) if NAME_RE.fullmatch(n)]


def reject(path: Path | str, reason: str) -> None:
    """Move a seed file that was refused to ``rejected/`` beside it, with a ``.reason``."""
    path = Path(path)
    safedirs.move_aside(path.parent, path.name, "rejected", reason=f"{reason}\n")


def archive(path: Path | str) -> Path:
    """Move a handled seed file to ``archive/`` beside it."""
    path = Path(path)
    with safedirs.opened(path.parent) as src, safedirs.opened(path.parent, "archive") as dst:
        dest, n = path.name, 1
        while safedirs.exists(dst, dest):
            n += 1
            dest = f"{path.stem}.{n}{path.suffix}"
        os.rename(path.name, dest, src_dir_fd=src, dst_dir_fd=dst)
    return path.parent / "archive" / dest
