"""Start-up errors an operator sees: one line saying what is wrong and what to do."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


class TestBusyPort:
    def test_serve_on_a_taken_port_is_one_line_and_exit_3(self, cli: Callable[..., Any],
                                                          taken_port: int) -> None:
        out = cli("serve", "--port", str(taken_port))
        assert out.code == 3, out
        assert out.err.strip().count("\n") == 0, out.err
        assert f"127.0.0.1:{taken_port} is already in use" in out.err
        assert "--port" in out.err and "Traceback" not in out.err

    def test_loop_on_a_taken_port_is_one_line_and_exit_3(self, cli: Callable[..., Any], dirs: Any,
                                                         taken_port: int) -> None:
        env = {**dirs.env, "HEALER__API__ENABLED": "true", "HEALER_PORT": str(taken_port),
               "HEALER_LOG_LEVEL": "error"}
        out = cli("loop", "--duration", "30", env=env)
        assert out.code == 3, out
        assert "Traceback" not in out.err
        assert f"127.0.0.1:{taken_port} is already in use" in out.err


class TestTokens:
    @pytest.mark.parametrize("token", ["", "short", "                    "])
    def test_off_loopback_bind_needs_a_real_token(self, cli: Callable[..., Any], dirs: Any,
                                                  token: str) -> None:
        out = cli("serve", "--host", "0.0.0.0", "--port", "0",
                  env={**dirs.env, "HEALER_TOKEN": token})
        assert out.code == 2, out
        assert "at least 16 characters" in out.err and "Traceback" not in out.err
