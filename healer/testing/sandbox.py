"""A ``Sandbox`` that records what each run asked of it, for tests of healer and of users'
own executors (``Executor(settings, sandbox=RecordingSandbox())``)::

    box = RecordingSandbox()                      # runs commands unconfined, and records
    outcome = await CommandExecutor(settings, sandbox=box).run(task)
    assert box.calls[0].cwd in box.calls[0].writable

    RecordingSandbox(unavailable="bwrap not found")   # a machine without a sandbox

``inner`` decides how the command really runs (default: ``NoSandbox``, as it is); pass a
``BwrapSandbox`` to record and confine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from healer.agents.sandbox import Endpoint, NoSandbox, Sandbox, Wrapped


@dataclass(frozen=True)
class SandboxCall:
    """One ``wrap`` call: what a run asked to run, where, and with what access."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    network: tuple[Endpoint, ...] = ()
    wrapped: Wrapped | None = field(default=None, compare=False, repr=False)


class RecordingSandbox:
    """Records every ``wrap`` in ``calls``; ``unavailable`` makes it refuse to start."""

    name = "recording"

    def __init__(self, inner: Sandbox | None = None, *, unavailable: str = "") -> None:
        self.inner: Sandbox = inner if inner is not None else NoSandbox()
        self.why = unavailable
        self.calls: list[SandboxCall] = []

    @property
    def confined(self) -> bool:
        return self.inner.confined

    def unavailable(self) -> str:
        return self.why or self.inner.unavailable()

    def wrap(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
             writable: Sequence[str] = (), readable: Sequence[str] = (),
             network: Sequence[Endpoint] = ()) -> Wrapped:
        wrapped = self.inner.wrap(argv, cwd=cwd, env=env, writable=writable,
                                  readable=readable, network=network)
        self.calls.append(SandboxCall(tuple(argv), cwd, dict(env), tuple(writable),
                                      tuple(readable), tuple(network), wrapped))
        return wrapped
