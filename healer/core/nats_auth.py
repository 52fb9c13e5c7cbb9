"""How a NATS client proves who it is: the one mapping from healer's credential settings
(user and password, a token, or a ``.creds`` file — NATS's own security model) to nats-py's
``connect()`` options, shared by the fleet's link and the JetStream store. Credentials go only
to nats-py: never into a log line, an error or ``repr``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NatsAuth:
    """How a NATS client proves who it is; ``repr`` never shows a secret."""

    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    credentials: str = ""

    @classmethod
    def from_fleet(cls, fleet: Any) -> NatsAuth:
        return cls(fleet.nats_user, fleet.nats_password, fleet.nats_token,
                   fleet.nats_credentials)

    @classmethod
    def from_store(cls, store: Any) -> NatsAuth:
        return cls(store.nats_user, store.nats_password, store.nats_token, store.credentials)

    def options(self) -> dict[str, Any]:
        """nats-py ``connect()`` keyword arguments."""
        opts: dict[str, Any] = {}
        if self.user:
            opts.update(user=self.user, password=self.password)
        if self.token:
            opts["token"] = self.token
        if self.credentials:
            opts["user_credentials"] = self.credentials
        return opts
