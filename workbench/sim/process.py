"""The embedded engine in a process of its own: ``serve_sim_process(**knobs)``.

The child is ``python -m workbench.sim.process KNOBS_JSON``; why, how it starts and how it
dies with its parent: docs/embedded-engine-process.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import WorkbenchError, stderr_tail

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0  # a cold interpreter importing aiohttp + numpy on a loaded 2-core box
STOP_TIMEOUT_S = 5.0
PARENT_ENV = "WORKBENCH_PARENT_PID"  # the child's parent, for its parent-death signal


class SimProcessError(WorkbenchError):
    """The embedded engine's process did not start (its stderr tail says why)."""


@dataclass
class SimProcess:
    """A running engine process: where it listens, its pid and its resolved config."""

    base_url: str
    pid: int
    config: dict[str, Any] = field(default_factory=dict)


async def _wait_health(base_url: str, proc: asyncio.subprocess.Process, deadline: float) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=2.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for _ in range(600):  # bounded in count as well as by the deadline
            if proc.returncode is not None:
                raise SimProcessError(f"the embedded engine exited ({proc.returncode}) "
                                      "before /health answered")
            try:
                async with session.get(f"{base_url}/health") as resp:
                    if resp.status == 200:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)  # a poll interval of a readiness probe, not a test wait
    raise SimProcessError(f"the embedded engine at {base_url} did not answer /health in time")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


@contextlib.asynccontextmanager
async def serve_sim_process(
    *, ready_timeout_s: float = READY_TIMEOUT_S, **engine_knobs: Any
) -> AsyncIterator[SimProcess]:
    """Start the embedded engine with ``engine_knobs`` in a child process; stop it on exit.
    Knobs are validated first, so a bad one fails as in-process, before any process."""
    from workbench.sim.cluster import split_knobs
    from workbench.sim.config import EngineConfig

    engine_only, _cluster = split_knobs(engine_knobs)  # a simulated cluster's knobs too
    EngineConfig.from_knobs(**engine_only)
    # the child's stderr: an unnamed file, read back only to say why it did not start
    with tempfile.TemporaryFile(prefix="workbench-sim-") as err_fh:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "workbench.sim.process", json.dumps(engine_knobs),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err_fh,
            env={**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())},
        )
        try:
            deadline = time.monotonic() + ready_timeout_s
            assert proc.stdout is not None
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), ready_timeout_s)
            except TimeoutError:
                line = b""
            if not line:
                raise SimProcessError("the embedded engine's process did not start: "
                                      f"{stderr_tail(err_fh) or 'no output'}")
            ready = json.loads(line)
            await _wait_health(ready["base_url"], proc, deadline)
            log.info("embedded engine (pid %d) on %s", proc.pid, ready["base_url"])
            yield SimProcess(ready["base_url"], proc.pid, ready.get("config") or {})
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            await asyncio.shield(_stop(proc))


# -- the child --------------------------------------------------------------------------------
async def _child(knobs: dict[str, Any]) -> None:
    from workbench.sim.server import serve_sim

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)

    def watch_parent() -> None:  # EOF on stdin: the parent is gone or done with us
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.buffer.read()
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    async with serve_sim("127.0.0.1", 0, **knobs) as handle:
        ready = {"base_url": handle.base_url, "config": handle.config.to_dict()}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        await done.wait()


def main(argv: list[str] | None = None) -> int:
    parent = os.environ.get(PARENT_ENV)
    if parent:  # SIGTERM (a clean stop) when the parent dies, even before stdin's EOF
        from workbench.signals import die_with_parent

        die_with_parent(int(parent), signal.SIGTERM)
    args = sys.argv[1:] if argv is None else argv
    knobs = json.loads(args[0]) if args else {}
    try:
        import uvloop  # the same loop the CLI uses, when installed
    except ImportError:
        asyncio.run(_child(knobs))
    else:
        uvloop.run(_child(knobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
