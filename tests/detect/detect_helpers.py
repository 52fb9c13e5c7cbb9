"""Helpers shared by the detection tests."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent / "corpus"


def by_line(alerts: list[Any]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for a in alerts:
        out.setdefault(a.line_no, set()).add(a.code)
    return out


@dataclass
class Run:
    code: int
    out: str
    err: str


def scan_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEALER")}
    env.update({"HEALER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def run_scan(tmp_path: Path, *args: str, input: bytes | None = None, timeout: float = 60,
             **env: str) -> Run:
    """The real `healer scan` in a child process, in ``tmp_path``."""
    proc = subprocess.run([sys.executable, "-m", "healer", "scan", *args], cwd=tmp_path,
                          env=scan_env(tmp_path, **env), input=input, capture_output=True,
                          timeout=timeout)
    return Run(proc.returncode, proc.stdout.decode(errors="replace"),
               proc.stderr.decode(errors="replace"))


