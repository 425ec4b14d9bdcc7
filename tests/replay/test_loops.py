"""``run_anywhere``: the sync entry points from plain code and from inside a running loop.

Inside a loop (a notebook cell) the coroutine runs on a fresh loop on a worker thread:
its result and exceptions come back, an interrupt cancels it and re-raises, it works twice
in a row, and — in a real ipykernel — cells queued behind a synchronous ``wb.run`` /
``wb.sweep`` / ``wb.capacity_search`` all run afterwards (nest_asyncio made the next cell
fail with "cannot enter context … already entered" and every later one hang).
"""

from __future__ import annotations

import asyncio
import signal
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from workbench.config import RunConfig
from workbench.data import path as data_path
from workbench.replay.loops import run_anywhere

DEMO = str(data_path("tracelab/multi_session_example.csv"))


async def where() -> tuple[str, int]:
    await asyncio.sleep(0)
    return threading.current_thread().name, id(asyncio.get_running_loop())


class Boom(ValueError):
    pass


async def fails() -> None:
    await asyncio.sleep(0)
    raise Boom("from the worker loop")


def test_without_a_loop_it_runs_here() -> None:
    name, _ = run_anywhere(where())
    assert name == threading.current_thread().name
    with pytest.raises(Boom, match="from the worker loop"):
        run_anywhere(fails())


async def test_inside_a_running_loop_it_runs_on_a_fresh_loop_twice_in_a_row() -> None:
    mine = id(asyncio.get_running_loop())
    first = run_anywhere(where())
    second = run_anywhere(where())
    for name, loop in (first, second):
        assert name == "workbench-run" and loop != mine
    assert asyncio.get_running_loop() is not None  # this loop is untouched and still ours


async def test_a_virtual_run_inside_a_running_loop_is_on_a_virtual_loop_on_a_worker() -> None:
    from workbench.clock import VirtualTimeLoop

    async def virtual_where() -> tuple[str, bool, float]:
        await asyncio.sleep(3600.0)  # an hour of virtual time, at once
        loop = asyncio.get_running_loop()
        return threading.current_thread().name, isinstance(loop, VirtualTimeLoop), loop.time()

    assert run_anywhere(virtual_where(), virtual=True) == ("workbench-run", True, 3600.0)
    with pytest.raises(Boom, match="from the worker loop"):
        run_anywhere(fails(), virtual=True)


def test_a_virtual_run_without_a_loop_runs_here() -> None:
    async def virtual_now() -> tuple[str, float]:
        await asyncio.sleep(5.0)
        return threading.current_thread().name, asyncio.get_running_loop().time()

    assert run_anywhere(virtual_now(), virtual=True) == (threading.current_thread().name, 5.0)


async def test_an_exception_comes_back_with_its_type_and_traceback() -> None:
    with pytest.raises(Boom) as err:
        run_anywhere(fails())
    frames = [f.name for f in err.traceback]
    assert "fails" in frames  # raised where it happened, on the worker's loop


async def test_a_real_replay_inside_a_running_loop(tmp_path: Path) -> None:
    from workbench.executors.dispatch import run

    cfg = RunConfig.from_dict({"trace": {"path": DEMO, "max_items": 2},
                               "target": {"url": "sim", "engine": {"speedup": 50.0}},
                               "out_dir": str(tmp_path)})
    results = [run(cfg), run(cfg)]
    for result in results:
        assert [r.status for r in result.records] == ["ok"] * 5
    assert results[0].run_id != results[1].run_id


@pytest.mark.timeout(60)
@pytest.mark.parametrize("virtual", [False, True])
def test_an_interrupt_cancels_the_run_waits_for_it_and_reraises(virtual: bool) -> None:
    """Jupyter's Interrupt (SIGINT in the waiting thread): the coroutine is cancelled, its
    clean-up runs to the end before the call returns, and KeyboardInterrupt propagates;
    a run in virtual time (``simulate`` from a notebook cell) as a live one."""
    started, cleaned = threading.Event(), threading.Event()

    async def long_run() -> None:
        try:
            started.set()
            if virtual:  # virtual time has no idle wait: it moves on from timer to timer
                for _ in range(10**9):  # bounded; cancelled long before
                    await asyncio.sleep(1.0)
            else:
                await asyncio.Event().wait()  # until cancelled
        finally:
            await asyncio.sleep(0)  # clean-up that still needs the loop
            cleaned.set()

    async def in_a_loop() -> None:
        run_anywhere(long_run(), virtual=virtual)

    def interrupt() -> None:
        if started.wait(30):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    # a loop driven as ipykernel drives its own: SIGINT raises KeyboardInterrupt in the
    # running cell (asyncio.run would instead only cancel its main task on the first one)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    loop = asyncio.new_event_loop()
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(in_a_loop())
    finally:
        signal.signal(signal.SIGINT, previous)
        loop.close()
    assert cleaned.is_set()


# -- a real kernel, cells queued behind a synchronous call ------------------------------------
@pytest.fixture
def kernel() -> Any:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_cells(kc: Any, cells: list[str], timeout_s: float = 240.0) -> list[dict[str, Any]]:
    """Send every cell at once (queued as Run All queues them), collect each reply and the
    errors shown."""
    ids = [kc.execute(textwrap.dedent(c)) for c in cells]
    replies: dict[str, dict[str, Any]] = {}
    for _ in range(len(ids) * 4):  # bounded: one reply per cell, other shell messages skipped
        if len(replies) == len(ids):
            break
        msg = kc.get_shell_msg(timeout=timeout_s)
        parent = msg["parent_header"].get("msg_id")
        if parent in ids:
            replies[parent] = msg["content"]
    return [replies[i] for i in ids]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cells_queued_behind_sync_calls_all_run_in_a_real_kernel(
    kernel: Any, tmp_path: Path
) -> None:
    setup = f"""
        import asyncio, workbench as wb
        cfg = wb.RunConfig.from_dict({{"trace": {{"path": {DEMO!r}, "max_items": 2}},
                                      "target": {{"url": "sim", "engine": {{"speedup": 50.0}}}}}})
        out = {str(tmp_path)!r}
    """
    cells = [
        setup,
        "result = wb.run(cfg)",
        "sweep = wb.sweep(cfg, {'arrival.rate': [1, 2]}, virtual=True, out_dir=out)",
        "cap = wb.capacity_search(cfg, 'arrival.max_concurrency', 1, 4, 'ttft_ms:p90<=100000', "
        "tolerance=1, max_probes=3, virtual=True, out_dir=out)",
        "again = wb.sweep(cfg, {'arrival.rate': [1]}, virtual=True, out_dir=out)",
        "await asyncio.sleep(0)\n"
        "summary = (len(result.records), [p['status'] for p in sweep.manifest.points], "
        "cap.capacity['status'], again.manifest.status)\n"
        "assert summary == (5, ['done', 'done'], 'above_range', 'completed'), summary",
    ]
    replies = run_cells(kernel, cells)
    for cell, reply in zip(cells, replies, strict=True):
        assert reply["status"] == "ok", (cell, reply.get("ename"), reply.get("evalue"))
