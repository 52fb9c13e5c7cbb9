"""``healer doctor``: what is installed, reachable and writable, and which executor runs."""

from __future__ import annotations

HELP = "check dependencies, tools, folders, settings and the executor choice"


def main(argv: list[str]) -> int:
    from healer.commands._common import add_settings_args, parser, print_json, run, settings_from

    p = parser(
        "doctor",
        "Report what healer needs and whether it is there: Python dependencies, git,\n"
        "nats-server, the claude CLI, writable state/results/fleet dirs, the settings\n"
        "sources, which executor `auto` picks and why, whether the agent sandbox\n"
        "(bubblewrap) starts here (OFF with agents.sandbox: off), and (with kube.enabled)\n"
        "whether the cluster answers, as whom, and with which permissions. It changes\n"
        "nothing: a folder that does not exist yet is reported as one healer will create.",
        "exit codes: 0 everything required is fine, 1 something required is missing,\n"
        "2 bad settings",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    add_settings_args(p)
    args = p.parse_args(argv)

    def body() -> int:
        from healer import doctor

        settings = settings_from(args)
        checks = doctor.run_all(settings)
        kube = doctor.kube_report(settings)
        if kube is not None:
            checks.append(doctor.kube_check(kube))
        failed = [c for c in checks if c.required and not c.ok]
        if args.json:
            out: dict[str, object] = {"ok": not failed, "checks": [c.as_dict() for c in checks]}
            if kube is not None:
                out["kube"] = kube
            print_json(out)
        else:
            from rich.console import Console
            from rich.table import Table

            table = Table(title="healer doctor", show_lines=False)
            table.add_column("check")
            table.add_column("")
            table.add_column("detail", overflow="fold")
            for c in checks:
                mark = "[green]ok[/]" if c.ok else ("[red]MISSING[/]" if c.required
                                                    else "[yellow]optional[/]")
                if c.warning:
                    mark = f"[yellow]{c.warning}[/]"
                table.add_row(c.name, mark, c.detail)
            Console().print(table)
            if failed:
                Console(stderr=True).print(
                    f"[red]{len(failed)} required check(s) failed:[/] "
                    + ", ".join(c.name for c in failed))
        return 1 if failed else 0

    return run(body)
