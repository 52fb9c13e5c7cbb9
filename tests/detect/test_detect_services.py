"""Per-service verdicts: 3 errors or 5 warnings, bands, 5 samples of 200 characters."""

from __future__ import annotations

from pathlib import Path

from detect_helpers import run_scan

from healer.detect.catalog import Catalog
from healer.detect.engine import Engine
from healer.detect.services import ServiceTally, band


def tally(text: str) -> ServiceTally:
    t = ServiceTally()
    t.add(Engine(Catalog.load(), engine="re").scan_bytes(text.encode(), source="merged.log"))
    return t


def test_thresholds_levels_and_samples() -> None:
    lines = [f"[pod/api/app] 2024-05-01T10:00:0{i}Z ERROR upstream: connection refused {i}"
             + "x" * 300 for i in range(7)]
    lines += [f"[pod/web/app] 2024-05-01T10:00:0{i}Z WARN request timeout" for i in range(4)]
    lines += [f"[pod/db/app] 2024-05-01T10:00:0{i}Z WARN request timeout" for i in range(5)]
    lines += ["[pod/one/app] 2024-05-01T10:00:00Z ERROR connection refused"] * 2
    reports = {r.service: r for r in tally("\n".join(lines) + "\n").reports()}
    assert set(reports) == {"pod/api/app", "pod/db/app"}  # web: 4 warnings; one: 2 errors
    api = reports["pod/api/app"]
    assert (api.errors, api.warnings, api.band) == (7, 0, "low")
    assert len(api.samples) == 5 and all(len(s) <= 200 for s in api.samples)
    assert (reports["pod/db/app"].errors, reports["pod/db/app"].warnings) == (0, 5)


def test_bands_and_merging_worker_tallies() -> None:
    assert [band(n) for n in (9, 10, 19, 20, 49, 50)] == [
        "low", "medium", "medium", "high", "high", "critical"]
    a, b = tally("[pod/x/c] ERROR connection refused\n" * 30), ServiceTally()
    b.merge(a.to_dict())
    b.merge(a.to_dict())
    (r,) = b.reports()
    assert (r.errors, r.band, len(r.samples)) == (60, "critical", 5)


def test_scan_prints_the_services_over_the_thresholds(tmp_path: Path) -> None:
    log = tmp_path / "merged.log"
    log.write_text("[pod/rex-1/agent] 2024-05-01T10:00:00Z ERROR connect: connection refused\n"
                   * 3 + "[pod/blaze-1/agent] 2024-05-01T10:00:00Z ERROR connection refused\n")
    r = run_scan(tmp_path, str(log))
    assert r.code == 1, r.err
    assert "1 service(s) over the thresholds" in r.out
    assert "pod/rex-1/agent" in r.out and "pod/blaze-1/agent" not in r.out.split(
        "over the thresholds")[1]
    assert "[pod/rex-1/agent] 2024" in r.out  # log text is shown as it is, not as markup
