"""``start_now``: a coroutine's first step runs at once; the rest as a Task would run it."""

import asyncio

import pytest

from workbench.backends.eager import start_now


async def test_a_coroutine_that_never_waits_is_done_before_it_is_awaited():
    log = []

    async def work():
        log.append("ran")
        return 7

    wrapped, finished = start_now(work())
    assert log == ["ran"] and finished  # before anyone awaited it
    assert await wrapped == 7


async def test_one_that_waits_runs_its_first_part_now_and_the_rest_later():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    log = []

    async def work():
        log.append("first")
        value = await fut
        log.append(("after", value))
        await asyncio.sleep(0)  # a bare yield too
        return value * 2

    wrapped, finished = start_now(work())
    assert log == ["first"] and not finished
    task = asyncio.ensure_future(wrapped)
    await asyncio.sleep(0)
    assert not task.done()
    fut.set_result(21)
    assert await asyncio.wait_for(task, 5) == 42
    assert log == ["first", ("after", 21)]


async def test_the_futures_exception_reaches_the_coroutine():
    fut = asyncio.get_running_loop().create_future()
    seen = []

    async def work():
        try:
            await fut
        except KeyError as exc:
            seen.append(exc)
            raise RuntimeError("handled and re-raised") from exc

    task = asyncio.ensure_future(start_now(work())[0])
    fut.set_exception(KeyError("k"))
    with pytest.raises(RuntimeError, match="handled"):
        await task
    assert len(seen) == 1


async def test_cancelling_the_waiter_cancels_the_coroutine_where_it_waits():
    fut = asyncio.get_running_loop().create_future()
    cleaned = []

    async def work():
        try:
            await fut
        finally:
            cleaned.append(True)

    task = asyncio.ensure_future(start_now(work())[0])
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_an_error_in_the_first_step_is_raised_where_it_is_awaited():
    async def work():
        raise ValueError("at once")

    wrapped, finished = start_now(work())
    assert finished
    with pytest.raises(ValueError, match="at once"):
        await wrapped


async def test_a_large_body_that_fills_the_socket_still_arrives_whole(monkeypatch):
    """A ~20 MB request pauses the transport mid-write (the server shares this loop, so
    it reads nothing until the writer yields): the driven rest of aiohttp's body
    writer (``drain``) must finish it."""
    import workbench.backends.eager as eager
    from workbench.backends import BACKENDS
    from workbench.backends.base import WireRequest
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.records import RequestRecord
    from workbench.sim.server import serve_sim

    resumed = []
    real_resume = eager._resume
    monkeypatch.setattr(eager, "_resume", lambda c, y: resumed.append(y) or real_resume(c, y))
    n = 3_000_000
    async with (
        asyncio.timeout(60),
        serve_sim(speedup=1000.0, max_model_len=n + 16, num_blocks=n // 16 + 64) as sim,
        Transport(TransportOptions(sim.base_url)) as t,
    ):
        rec = RequestRecord("x", "big", 0, "s", 0, "openai", None, 0, n, 2)
        await t.send(BACKENDS.get("openai"), WireRequest("big", [7] * n, 2), rec)
    assert rec.status == "ok", rec.error
    assert rec.prompt_tokens == n and rec.completion_tokens == 2
    assert len(resumed) == 1 and isinstance(resumed[0], asyncio.Future)  # it did wait


async def test_cancelling_a_request_mid_body_leaves_the_transport_usable():
    """Cancelled while its ~20 MB body waits on a paused socket: the record says
    cancelled, the half-written connection is dropped, and the next request works."""
    from workbench.backends import BACKENDS
    from workbench.backends.base import WireRequest
    from workbench.backends.transport import Transport, TransportOptions
    from workbench.records import RequestRecord
    from workbench.sim.server import serve_sim

    n = 3_000_000
    codec = BACKENDS.get("openai")
    async with (
        asyncio.timeout(60),
        serve_sim(speedup=1000.0, max_model_len=n + 16, num_blocks=n // 16 + 64) as sim,
        Transport(TransportOptions(sim.base_url)) as t,
    ):
        big = RequestRecord("x", "big", 0, "s", 0, "openai", None, 0, n, 2)
        task = asyncio.ensure_future(t.send(codec, WireRequest("big", [7] * n, 2), big))
        await asyncio.sleep(0)  # the body is partly out, the rest waits on the socket
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        small = RequestRecord("x", "small", 0, "s", 0, "openai", None, 0, 16, 2)
        await t.send(codec, WireRequest("small", list(range(16)), 2), small)
    assert big.status == "cancelled"
    assert small.status == "ok", small.error
    assert small.completion_tokens == 2
