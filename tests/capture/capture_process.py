"""``workbench capture`` as a user runs it: a process of its own, stopped with SIGTERM.

The timed tests run the proxy this way (and the engine as ``sim serve`` would, in a
process of its own): the agent script's loop then shares no CPU time with the proxy's,
and the times each side measures (the script's waits, the proxy's think times) differ
only by the hop between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from interrupt import default_sigint

LINE_TIMEOUT_S = 60.0


@dataclass
class Capture:
    url: str = ""
    console: str = ""  # everything it printed, once stopped
    returncode: int | None = None
    pid: int = 0
    stopped: bool = False  # a stop signal was sent (``signal``): leaving sends none

    def signal(self, sig: int) -> None:
        """Send ``sig`` now (leaving the block then only waits for the end)."""
        import os

        self.stopped = True
        os.kill(self.pid, sig)

    async def stopped_listening(self) -> None:
        """Until the proxy refuses connections (it took a stop signal)."""
        await stopped_listening(self.url)


async def stopped_listening(url: str) -> None:
    """Until the proxy at ``url`` (on 127.0.0.1) refuses connections: it took a stop
    signal, or its context is being left."""
    port = int(url.rsplit(":", 1)[1])
    async with asyncio.timeout(LINE_TIMEOUT_S):  # a failure bound only
        while True:  # polled: the refusal is the only sign from outside
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return
            w.close()
            await asyncio.sleep(0.01)


async def spawn_capture(upstream: str, out: Path, *args: str) -> asyncio.subprocess.Process:
    """``workbench capture --upstream UPSTREAM -o OUT ARGS`` as a subprocess, its output
    piped, SIGINT at its default (so a test can send the Ctrl-C a user would)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workbench", "capture", "--upstream", upstream, "-o", str(out),
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=default_sigint,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def capture_process(upstream: str, out: Path, *args: str) -> AsyncIterator[Capture]:
    proc = await spawn_capture(upstream, out, *args)
    cap = Capture(pid=proc.pid)
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT_S)).decode()
        if not first.startswith("capture proxy on http://"):
            raise RuntimeError(f"workbench capture did not start: {first!r}")
        cap.url = first.split()[3]
        cap.console = first
        yield cap
        if not cap.stopped:
            proc.send_signal(signal.SIGTERM)
        rest, err = await asyncio.wait_for(proc.communicate(), LINE_TIMEOUT_S)
        cap.console += rest.decode() + err.decode()
        cap.returncode = proc.returncode
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
