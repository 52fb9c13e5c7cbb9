"""The public surface of healer.detect."""

from __future__ import annotations

import subprocess
import sys

import pytest

import healer.detect


class TestExports:
    def test_every_name_resolves(self) -> None:
        """Every name in healer.detect.__all__ is importable from the package."""
        for name in healer.detect.__all__:
            assert getattr(healer.detect, name).__name__ == name

    def test_unknown_name(self) -> None:
        """An unknown attribute is an AttributeError, as for any module."""
        with pytest.raises(AttributeError):
            healer.detect.NoSuchThing  # noqa: B018

    def test_scan_path_stays_light(self) -> None:
        """Importing the engine does not pull in the follow/Loki/settings machinery."""
        code = ("import sys, healer.detect.engine, healer.detect._files;"
                "print(sorted(m for m in ('dataclasses', 'jsonschema', 'httpx', 'websockets',"
                " 'healer.config', 'rich') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip() == "[]"
