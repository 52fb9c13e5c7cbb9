"""healer scan: find failure patterns in logs (files, stdin, a command's output, Loki)."""

from __future__ import annotations

import argparse
import gc

from healer.commands._common import add_settings_args, parser, run

HELP = "find failure patterns in logs (files, stdin, a command, Loki)"
# The process may end without Python's teardown once the scan is done (healer.cli): a scan
# leaves nothing to finalize, and tearing down costs as much as scanning 50 MB.
EXIT_AT_ONCE = True

EPILOG = """\
examples:
  healer scan /var/log/agent.log                    alerts and a summary table
  healer scan --json agent.log > alerts.jsonl       one JSON alert per line
  kubectl logs -n cto pod/x | healer scan -         stdin
  healer scan --follow --since 10m agent.log        like tail -F, survives rotation
  healer scan --cmd -- kubectl logs -f -n cto -l app=coderun
  healer scan --loki http://127.0.0.1:3100 --query '{namespace="cto"}' --since 1h
  healer scan --k8s 'namespace=cto,selector=app=coderun'   pod logs through the API
  healer scan --catalog my-patterns.yaml agent.log  add your own patterns (see docs)

exit codes: 0 no alerts · 1 alerts found · 2 usage or input error (missing file, bad
catalog, bad flag) · 3 a source could not be read (Loki unreachable, command failed), or
a scan worker died while writing its output (the output is incomplete).

environment: HEALER_DETECT_ENGINE=re|hyperscan|auto picks the matcher;
HEALER_DETECT_NATIVE=0 turns off the native fast paths (same alerts, slower);
HEALER_DETECT_LIBHS=0 scans with the hyperscan package, not the system's libhs;
HEALER_CACHE_DIR holds compiled catalogs.
"""


def _build() -> argparse.ArgumentParser:
    p = parser("scan", "Scan logs for the failure patterns of the detection catalog.", EPILOG)
    p.add_argument("files", nargs="*", metavar="FILE", help="log files; - reads stdin")
    p.add_argument("--catalog", metavar="FILE",
                   help="your catalog (YAML); default: setting detect.catalog")
    p.add_argument("--catalog-mode", choices=["extend", "replace"],
                   help="add your catalog to the embedded one (default) or replace it")
    p.add_argument("--json", action="store_true", help="one JSON alert per line on stdout")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep reading as the logs grow (files: like tail -F)")
    p.add_argument("--since", metavar="WHEN",
                   help="skip lines older than this: a duration (10m, 2h, 1d) or an ISO time")
    p.add_argument("--start", metavar="WHEN",
                   help="when the agent started (ISO time or Unix seconds); pre-flight "
                        "patterns count only in the window after it. Default: first line")
    p.add_argument("--loki", metavar="URL", help="read from Loki at URL (needs --query)")
    p.add_argument("--query", metavar="LOGQL", help="LogQL selector for --loki")
    p.add_argument("--loki-org", metavar="TENANT", help="X-Scope-OrgID for a multi-tenant Loki")
    p.add_argument("--k8s", metavar="SPEC",
                   help="follow pod logs through the Kubernetes API, no kubectl: "
                        "'namespace=cto,selector=app=coderun' (also context=, kubeconfig=, "
                        "container=); new pods are picked up as they start")
    p.add_argument("--cmd", nargs=argparse.REMAINDER, metavar="-- ARGV",
                   help="scan a command's output: --cmd -- kubectl logs -f ... (must be last)")
    p.add_argument("--engine", choices=["auto", "re", "hyperscan"],
                   help="matcher (default: $HEALER_DETECT_ENGINE or auto)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes for files of 32 MiB or more (default: up to 2); with fewer "
                        "than the cores, each also reads ahead on a thread, which takes a "
                        "balanced share of the Hyperscan pass")
    p.add_argument("--duration", type=float, metavar="S", help="with --follow: stop after S s")
    p.add_argument("--no-summary", action="store_true", help="no summary table")
    add_settings_args(p)
    return p


def main(argv: list[str]) -> int:
    args_list = list(argv)
    command: list[str] = []
    if "--cmd" in args_list:  # everything after --cmd is the command, flags included
        at = args_list.index("--cmd")
        command = args_list[at + 1:]
        if command[:1] == ["--"]:
            command = command[1:]
        args_list = args_list[:at]
    args = _build().parse_args(args_list)
    args.cmd = command
    args.cmd_given = len(args_list) < len(argv)
    # Start-up (imports, the catalog, the engine) makes ~100,000 objects and no garbage: the
    # cyclic collector would walk them over and over (~20 ms). ScanRun turns it back on once
    # the engine is built; a file scan pauses it again while it scans.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return run(lambda: _scan(args, collecting))
    finally:
        if collecting:
            gc.enable()


def _scan(args: argparse.Namespace, collect: bool = True) -> int:
    from healer.commands._scan_run import ScanRun, detect_settings
    from healer.errors import UsageError

    if args.cmd_given and not args.cmd:
        raise UsageError("--cmd needs a command: --cmd -- ARGV...")
    if not args.files and not args.cmd and not args.loki and not args.k8s:
        raise UsageError("nothing to scan: give FILE…, - for stdin, --cmd -- ARGV, --loki URL "
                         "or --k8s SPEC")
    if args.k8s:
        from healer.play.kube.source import parse_spec

        parse_spec(args.k8s)  # a bad spec is a usage error before anything connects
    if bool(args.loki) != bool(args.query):
        raise UsageError("--loki and --query go together")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    return ScanRun(args, detect_settings(args), collect=collect).run()
