"""The one subprocess helper: argv lists only, a timeout always, output captured.

The child runs in its own process group so a timeout kills it *and* everything it spawned;
nothing is left orphaned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT = 1 << 20  # keep at most 1 MiB of each stream


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def kill_group(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """Terminate the process group of ``proc``, then kill it if it does not go."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> ProcResult:
    """Run ``argv`` (never a shell string) and return its captured result."""
    if isinstance(argv, str):
        raise TypeError("argv must be a list of strings, not a shell string")
    args = tuple(str(a) for a in argv)
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input.encode() if input is not None else None, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    return ProcResult(
        argv=args,
        returncode=proc.returncode if proc.returncode is not None else -9,
        stdout=out[:MAX_OUTPUT].decode(errors="replace"),
        stderr=err[:MAX_OUTPUT].decode(errors="replace"),
        timed_out=timed_out,
    )


async def run_async(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    detach_output: Path | str | None = None,
) -> ProcResult:
    """``run`` for an event loop: the child is awaited, never blocked on.

    Same rules: an argv list, its own process group, the group killed on timeout or
    cancellation. ``detach_output`` sends stdout and stderr to that file instead of pipes —
    for commands that leave a daemon behind (``ssh -f``), whose inherited pipes would
    otherwise never reach end-of-file; the result's output is then empty.
    """
    import asyncio

    if isinstance(argv, str):
        raise TypeError("argv must be a list of strings, not a shell string")
    args = tuple(str(a) for a in argv)
    sink = open(detach_output, "ab") if detach_output is not None else None  # noqa: SIM115
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=cwd, env=dict(env) if env is not None else None,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=sink if sink is not None else asyncio.subprocess.PIPE,
            stderr=sink if sink is not None else asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        if sink is not None:
            sink.close()
        return ProcResult(args, 127, "", f"cannot run {args[0]!r}: {exc.strerror or exc}")
    if sink is not None:
        sink.close()  # the child has its own copy

    def killpg(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    timed_out = False
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(input.encode() if input is not None else None), timeout)
    except TimeoutError:
        timed_out = True
        killpg(signal.SIGKILL)
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        killpg(signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    return ProcResult(
        argv=args,
        returncode=proc.returncode if proc.returncode is not None else -9,
        stdout=(out or b"")[:MAX_OUTPUT].decode(errors="replace"),
        stderr=(err or b"")[:MAX_OUTPUT].decode(errors="replace"),
        timed_out=timed_out,
    )
