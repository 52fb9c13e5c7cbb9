"""healer's exception tree.

Every error a caller may want to branch on carries structured fields, so nobody has to match
on message strings. The command line maps them to exit codes (see ``exit_code``)::

    HealerError                      base of everything healer raises on purpose
    ├── UsageError                   a user mistake: bad flag, bad input file      exit 2
    │   ├── ConfigError              a settings file or value is wrong (file, key, expected)
    │   ├── UnsafeNameError          a name that would become a path/host/argv is refused
    │   ├── ApprovalError            nothing of the incident waits for that verdict (incident)
    │   └── HostNotAllowedError      a host outside the setting that lists them (host, setting)
    ├── StoreError                   the state store could not do what was asked
    │   ├── ConflictError            compare-and-set lost: the revision moved (kind, key)
    │   │   ├── AttemptLostError     a healing run's attempt lease was taken over (attempt_id)
    │   │   └── RemediationLostError a play remediation's lease was taken over (remediation)
    │   └── NotFoundError            no record under that key
    ├── RejectedFile                 a results-bus or seed file was refused (reason)
    ├── UnsafeDirError               a directory healer writes is not private (path, reason) exit 2
    ├── SignatureError               a fleet document unsigned, forged, stale, replayed (reason)
    ├── GitHubError                  the GitHub watcher's request failed (status, path)
    │   └── GitHubRateLimitError     a rate limit holds further requests (until, secondary)
    ├── ExecutorError                an agent run failed (run_id, agent)
    │   ├── AgentUnavailableError    the executor cannot run here (CLI missing, no model)
    │   ├── AgentProcessError        the agent process failed (exit_code, stderr)
    │   ├── AgentResultError         the agent finished but reported an error
    │   ├── AgentTimeoutError        the wall-clock limit was hit; the run was killed
    │   └── SlotWaitError            no agent slot came free in time; the run never started
    ├── NothingToReviewError         a healing branch changes nothing a PR could show
    ├── GitDirTamperedError          an agent changed the git dir healer made (changes)
    ├── KubeError                    the Kubernetes API failed or refused (status, reason)  exit 3
    │   └── KubeGoneError            410 Gone: a resourceVersion is too old; relist
    └── UnavailableError             a dependency or service is missing             exit 3
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # the command worked and found something (alerts, failures, unhealthy)
EXIT_USAGE = 2  # the user asked for something wrong; nothing was changed
EXIT_UNAVAILABLE = 3  # something healer needs is not installed or not reachable
EXIT_INTERRUPTED = 130


class HealerError(Exception):
    """Base class of all errors healer raises on purpose."""

    exit_code = EXIT_FINDINGS


class UsageError(HealerError):
    """The user asked for something that cannot be done as asked."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """A configuration file or value is invalid.

    ``file`` is the file that holds the bad value (or ``"environment"``/``"flags"``), ``key``
    the dotted path of the value, ``expected`` a short description of what would be valid.
    """

    def __init__(self, message: str, *, file: str = "", key: str = "", expected: str = ""):
        self.file = file
        self.key = key
        self.expected = expected
        where = ": ".join(p for p in (file, f"key '{key}'" if key else "") if p)
        super().__init__(f"{where}: {message}" if where else message)


class UnsafeNameError(UsageError, ValueError):
    """A name that would become part of a path, host or argv was refused."""

    def __init__(self, name: str, what: str, reason: str):
        self.name = name
        self.what = what
        self.reason = reason
        super().__init__(f"unsafe {what} {name!r}: {reason}")


class ApprovalError(UsageError):
    """A person's approval or denial that cannot apply: nothing of ``incident`` waits for a
    verdict of that stage, or it is not yet eligible (``reason`` says which)."""

    def __init__(self, incident: str, reason: str):
        self.incident = incident
        self.reason = reason
        super().__init__(f"incident {incident}: {reason}")


class HostNotAllowedError(UsageError):
    """healer was asked to connect to a host its settings do not list (``host``), e.g. a
    session's ``tools_server`` outside ``play.tools_server_hosts`` (``setting``)."""

    def __init__(self, message: str, *, host: str = "", setting: str = ""):
        self.host = host
        self.setting = setting
        super().__init__(message)


class StoreError(HealerError):
    """The state store failed."""


class ConflictError(StoreError):
    """A compare-and-set lost: the record's revision is not the expected one."""

    def __init__(self, kind: str, key: str, expected: int | None, actual: int | None):
        self.kind = kind
        self.key = key
        self.expected = expected
        self.actual = actual
        super().__init__(f"{kind}/{key}: expected revision {expected}, found {actual}")


class AttemptLostError(ConflictError):
    """A healing run no longer owns its attempt: the attempt lease was taken over (its
    replica stopped renewing) or the record names another owner. The run stops and writes
    nothing more; ``expected`` is the run's owner revision, ``actual`` the record's."""

    def __init__(self, attempt_id: str, expected: int | None, actual: int | None):
        super().__init__("heal-attempts", attempt_id, expected, actual)
        self.attempt_id = attempt_id
        self.args = (f"attempt {attempt_id}: this run lost it (owner revision {expected}, "
                     f"the record's is {actual}); another replica took it over",)


class RemediationLostError(ConflictError):
    """A play remediation run no longer owns its remediation: its lease was taken over (its
    replica stopped renewing) or the record names another owner. The run stops and writes
    nothing more; ``expected`` is the run's owner revision, ``actual`` the record's."""

    def __init__(self, remediation: str, expected: int | None, actual: int | None):
        super().__init__("remediations", remediation, expected, actual)
        self.remediation = remediation
        self.args = (f"remediation {remediation}: this run lost it (owner revision "
                     f"{expected}, the record's is {actual}); another replica took it over",)


class NotFoundError(StoreError):
    """No record exists under the key."""

    def __init__(self, kind: str, key: str):
        self.kind = kind
        self.key = key
        super().__init__(f"{kind}/{key}: not found")


class RejectedFile(HealerError):
    """A file dropped on the bus (agent result or seed file) was refused."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class UnsafeDirError(HealerError):
    """A directory healer creates or writes into is not safe to use: a symlink, owned by
    another user, writable by group/others, or not a directory (``path``, ``reason``).

    healer refuses to start on one (like OpenSSH's ``StrictModes``) rather than let another
    local user redirect or read what it writes.
    """

    exit_code = EXIT_USAGE

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"unsafe directory {path}: {reason}")


class SignatureError(HealerError):
    """A heartbeat, fleet message or identity proof whose signature does not hold.

    ``reason`` is one of a short fixed set (``unsigned``, ``malformed``, ``stale``,
    ``bad_signature``, ``replayed``, ``no_secret``): it labels a metric, so it stays bounded.
    """

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class ExecutorError(HealerError):
    """An agent run failed."""

    def __init__(self, message: str, *, agent: str = "", run_id: str = ""):
        self.agent = agent
        self.run_id = run_id
        super().__init__(message)


class AgentUnavailableError(ExecutorError):
    """The executor cannot run here: its CLI is missing or no model is reachable."""


class AgentProcessError(ExecutorError):
    """The agent's process failed."""

    def __init__(self, message: str, *, exit_code: int | None = None, stderr: str = "", **kw: str):
        self.exit_code = exit_code
        self.stderr = stderr
        super().__init__(message, **kw)


class AgentResultError(ExecutorError):
    """The agent ran to the end but reported an error result."""


class AgentTimeoutError(ExecutorError):
    """The agent exceeded its wall-clock limit and was killed."""

    def __init__(self, message: str, *, timeout_s: float, **kw: str):
        self.timeout_s = timeout_s
        super().__init__(message, **kw)


class SlotWaitError(ExecutorError):
    """Every one of the machine's ``executor.max_concurrent`` agent slots stayed busy for
    ``executor.slot_wait_s``: the run was not started."""


class NothingToReviewError(HealerError):
    """The healing branch has commits, but no change a person could review in a PR (empty,
    net-zero, whitespace-only or marker files only)."""


class GitDirTamperedError(HealerError):
    """A healing run changed what healer made in its clone's git dir (hooks, config, ``.git``
    itself, alternates, symlinks): an attack. ``changes`` says what, one finding each."""

    def __init__(self, changes: list[str], *, where: str = ""):
        self.changes = list(changes)
        self.where = where
        shown = "; ".join(self.changes[:5]) + (
            f"; and {len(self.changes) - 5} more" if len(self.changes) > 5 else "")
        super().__init__(f"the healing agent tampered with the git dir healer made"
                         f"{f' ({where})' if where else ''}: {shown}")


class GitHubError(HealerError):
    """A request of the GitHub watcher failed: ``status`` is the HTTP status (0 when GitHub
    was not reached), ``path`` the API path asked for (never a token)."""

    def __init__(self, message: str, *, status: int = 0, path: str = ""):
        self.status = status
        self.path = path
        super().__init__(message)


class GitHubRateLimitError(GitHubError):
    """GitHub's rate limit holds the watcher's requests until ``until`` (epoch seconds):
    the primary hourly limit ran out, or (``secondary``) a secondary limit answered."""

    def __init__(self, message: str, *, until: float, secondary: bool = False,
                 status: int = 0, path: str = ""):
        self.until = until
        self.secondary = secondary
        super().__init__(message, status=status, path=path)


class UnavailableError(HealerError):
    """A dependency, binary or service healer needs is not available."""

    exit_code = EXIT_UNAVAILABLE


class KubeError(HealerError):
    """The Kubernetes API could not be reached, or answered with an error.

    ``status`` is the HTTP status (0 when there was no answer), ``reason`` the Status reason
    (``Forbidden``, ``NotFound``, ``Expired`` …) or the transport's error."""

    exit_code = EXIT_UNAVAILABLE
    # No cluster configured where the user said it is (a kubeconfig path that does not exist,
    # a context it does not hold): the user's to fix, like any usage error.
    USER_REASONS = frozenset({"NoKubeconfig", "NoConfiguration"})

    def __init__(self, message: str, *, status: int = 0, reason: str = ""):
        self.status = status
        self.reason = reason
        if reason in self.USER_REASONS:
            self.exit_code = EXIT_USAGE
        super().__init__(message)


class KubeGoneError(KubeError):
    """410 Gone: the resourceVersion a watch or continue token named was compacted away; the
    watcher lists again."""
