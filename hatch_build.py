"""Build hook: compiles the detection engine's native fast paths (healer/detect/_speedups.c).

Optional by design: without a C compiler or Python's headers, or with
``HEALER_NATIVE_BUILD=0``, the build says so on stderr and healer runs its pure-Python paths
(the same alerts, byte for byte; see healer/detect/_native.py). An editable install builds the
module next to its source; a wheel carries it and is tagged for this platform.

``python hatch_build.py`` builds it in place (after editing the C file, without reinstalling).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

SOURCE = Path("healer/detect/_speedups.c")


def build_speedups(root: Path) -> Path | None:
    """Compile the module into the source tree; its path, or None (reason on stderr)."""
    if os.environ.get("HEALER_NATIVE_BUILD", "").strip().lower() in ("0", "no", "off", "false"):
        return None
    src = root / SOURCE
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = src.with_name("_speedups" + suffix)
    include = sysconfig.get_paths()["include"]
    cc = _compiler()
    if cc is None:
        return _skip("no C compiler (cc, gcc or $CC)")
    if not (Path(include) / "Python.h").exists():
        return _skip(f"no Python headers in {include} (Debian: apt-get install python3-dev)")
    tmp = out.with_name(out.name + ".tmp")
    link = ["-bundle", "-undefined", "dynamic_lookup"] if sys.platform == "darwin" else \
        ["-shared"]
    argv = [*cc, "-O2", "-fPIC", "-Wall", f"-I{include}", str(src), *link, "-o", str(tmp), "-lm",
            *(["-ldl", "-pthread"] if sys.platform.startswith("linux") else [])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _skip(f"the compiler did not run: {exc}")
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return _skip(f"the compiler failed:\n{proc.stderr.strip()}")
    tmp.replace(out)  # atomic: a running healer never loads a half-written module
    return out


def _compiler() -> list[str] | None:
    """$CC, else the compiler Python was built with, else cc or gcc: the first that exists
    (Debian's Python names ``x86_64-linux-gnu-gcc``, which not every gcc install provides)."""
    for spec in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc"):
        argv = shlex.split(spec) if spec else []
        if argv and shutil.which(argv[0]):
            return argv
    return None


def _skip(reason: str) -> None:
    print(f"healer: native fast paths not built ({reason}); the pure-Python paths are used",
          file=sys.stderr)
    return None


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


class SpeedupsBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":  # type: ignore[attr-defined]
            return
        root = Path(self.root)  # type: ignore[attr-defined]
        built = build_speedups(root)
        if built is None:
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":  # an editable install imports it from the source tree
            build_data["force_include"][str(built)] = str(built.relative_to(root))


if __name__ == "__main__":
    raise SystemExit(0 if build_speedups(Path(__file__).resolve().parent) else 1)
