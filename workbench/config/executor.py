"""How the client executes a run (not what it sends): processes, record batching, hashes,
the HTTP client, pacing."""

from __future__ import annotations

import importlib.util
import typing
from dataclasses import dataclass
from typing import Literal

from workbench.errors import ConfigError
from workbench.keepalive import CONNECTION_IDLE_S

ExecutorKind = Literal["local", "processes", "ray"]


@dataclass(frozen=True)
class ExecutorSpec:
    """How the client executes, not what it sends (docs/executors.md)."""

    workers: int = 1
    record_flush_ms: float | None = None
    block_hashes: bool = True
    uvloop: bool = True
    kind: ExecutorKind = "local"
    address: str | None = None
    gc_freeze: bool = True
    keep_records: bool | Literal["auto"] = "auto"
    warm_connections: bool = True
    http: str = "httptools"
    pace_ms: float | Literal["auto"] = "auto"
    #: a pooled connection idle longer is closed, not reused; null: no bound
    #: (workbench/keepalive.py; docs/wire-protocols.md, "Idle connections")
    connection_idle_s: float | None = CONNECTION_IDLE_S

    def check(self) -> None:
        """The rules of this section alone, on values already of their type and range."""
        # imported here, not at every CLI start (bench/README.md, "CLI start-up")
        from workbench.backends.transport import HTTP_CLIENTS

        if self.http not in HTTP_CLIENTS:
            raise ConfigError(
                f"executor.http {self.http!r} is unknown; valid: {', '.join(HTTP_CLIENTS)}"
            )
        if self.address is not None and self.kind != "ray":
            raise ConfigError("executor.address is a Ray cluster address: set executor.kind 'ray'")
        if self.kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "executor.kind 'ray' needs Ray: pip install 'workbench[ray]' (or 'ray>=2.9')"
            )


EXECUTOR_KINDS: tuple[str, ...] = typing.get_args(ExecutorKind)
#: executor.keep_records "auto": the largest plan (requests) whose records stay in memory
#: (docs/executors.md, "The ``executor`` section")
KEEP_RECORDS_AUTO_MAX = 10_000
