import asyncio

import pytest

from workbench.clock import VirtualClock, WallClock, run_virtual


def test_virtual_clock_jumps_exactly():
    async def main():
        clock = VirtualClock()

        async def wake(t):
            await clock.sleep_until(t)
            return clock.now_ns()

        doomed = asyncio.create_task(asyncio.sleep(100))
        await asyncio.sleep(0)
        doomed.cancel()
        woke = await asyncio.gather(wake(5), wake(3_000_000_000), wake(1_000_000_007))
        await asyncio.sleep(10)
        return woke, clock.now_ns()

    assert run_virtual(main()) == ([5, 3_000_000_000, 1_000_000_007], 13_000_000_000)


def test_a_virtual_clock_made_in_its_loop_reads_it_without_asking_asyncio(monkeypatch):
    """Bound at construction (no ``get_running_loop`` per read: a system call on 3.11);
    a clock made outside any loop reads whichever virtual loop runs it, run after run."""
    outside = VirtualClock()

    async def main(t_ns):
        inside = VirtualClock()
        await inside.sleep_until(t_ns)
        with monkeypatch.context() as m:
            def no(*a):
                raise AssertionError("asked asyncio for the loop")

            m.setattr(asyncio, "get_running_loop", no)
            bound = inside.now_ns()
            await inside.sleep_until(t_ns + 7)
            after = inside.now_ns()
        return bound, after, outside.now_ns()

    assert run_virtual(main(5_000)) == (5_000, 5_007, 5_007)
    assert run_virtual(main(9)) == (9, 16, 16)  # a fresh loop: the unbound clock follows it


async def test_a_virtual_clock_made_in_a_real_loop_does_not_bind_to_it():
    clock = VirtualClock()  # a notebook's loop is running here, not a virtual one

    async def main():
        await asyncio.sleep(3)
        return clock.now_ns()

    # a virtual run from a notebook cell: the virtual loop runs in a thread
    assert await asyncio.to_thread(run_virtual, main()) == 3_000_000_000


def test_virtual_deadlock_is_reported():
    async def main():
        await asyncio.get_running_loop().create_future()

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(main())


async def test_wall_clock_monotonic():
    clock = WallClock()
    a = clock.now_ns()
    await clock.sleep_until(a + 1_000_000)
    assert clock.now_ns() >= a + 1_000_000


# -- steps (VirtualTimeLoop.call_step_at): run when nothing else can run first ----------


def test_steps_interleave_with_timers_in_deadline_order_timers_first_on_a_tie():
    log = []

    async def main():
        loop = asyncio.get_running_loop()
        clock = VirtualClock()

        def step(name):
            def run():
                log.append((name, clock.now_ns()))
                return False

            return run

        loop.call_step_at(10, step("step@10"))
        loop.call_step_at(5, step("step@5"))
        loop.call_at(10 / 1e9, lambda: log.append(("timer@10", clock.now_ns())))
        await clock.sleep_until(7)
        log.append(("task@7", clock.now_ns()))
        await clock.sleep_until(20)
        return clock.now_ns()

    assert run_virtual(main()) == 20
    assert log == [("step@5", 5), ("task@7", 7), ("timer@10", 10), ("step@10", 10)]


def test_a_step_that_wakes_a_waiter_lets_it_run_before_the_next_step():
    log = []

    async def main():
        loop = asyncio.get_running_loop()
        clock = VirtualClock()
        fut = loop.create_future()

        def first():
            fut.set_result(clock.now_ns())
            return True

        def same_instant():
            log.append(("same-instant step", clock.now_ns()))
            return False

        def later():
            log.append(("later step", clock.now_ns()))
            return False

        loop.call_step_at(100, first)
        loop.call_step_at(100, same_instant)
        loop.call_step_at(101, later)
        log.append(("woken", await fut, clock.now_ns()))
        await clock.sleep_until(200)

    run_virtual(main())
    # the steps of one instant run together; the woken task runs before the next instant
    assert log == [("same-instant step", 100), ("woken", 100, 100), ("later step", 101)]


def test_a_step_can_register_the_next_one_and_a_cancelled_step_moves_no_time():
    async def main():
        loop = asyncio.get_running_loop()
        clock = VirtualClock()
        ends = []
        done = loop.create_future()

        def step():
            ends.append(clock.now_ns())
            if len(ends) < 4:
                loop.call_step_at(clock.now_ns() + 1_000, step)
                return False
            done.set_result(None)
            return True

        loop.call_step_at(0, step)
        loop.call_step_at(10**12, step).cancel()  # never runs, never moves the clock
        await done
        with pytest.raises(ValueError, match="past"):
            loop.call_step_at(clock.now_ns() - 1, step)
        return ends, clock.now_ns()

    assert run_virtual(main()) == ([0, 1_000, 2_000, 3_000], 3_000)


def test_deadlock_is_reported_once_the_steps_run_out():
    ran = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_step_at(50, lambda: ran.append(50) or False)
        await loop.create_future()  # nothing will ever resolve it

    with pytest.raises(RuntimeError, match="deadlock"):
        run_virtual(main())
    assert ran == [50]


def _spin(n: int):
    """n loop iterations of virtual work (each a timer a microsecond ahead)."""

    async def go():
        for _ in range(n):
            await asyncio.sleep(1e-6)

    return go()


def test_a_signal_handler_on_a_virtual_loop_runs_within_the_wakeup_polls_cadence():
    """Only the loop's wake-up pipe is registered: it is polled every
    ``WAKEUP_POLL_EVERY`` iterations, so a signal's handler runs within that many."""
    import os
    import signal

    from workbench.clock import WAKEUP_POLL_EVERY

    async def main():
        loop = asyncio.get_running_loop()
        got = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR1, got.set)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            for waited in range(4 * WAKEUP_POLL_EVERY):  # bounded: a lost signal fails
                if got.is_set():
                    return waited
                await asyncio.sleep(1e-6)
            return None
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)

    waited = run_virtual(main())
    assert waited is not None and waited <= 2 * WAKEUP_POLL_EVERY


def test_a_registered_file_on_a_virtual_loop_is_polled_every_iteration():
    """Beside the wake-up pipe, a real file (here a socket with data waiting) is polled
    at each iteration: its reader runs at the first one, as before."""
    import socket

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        read = asyncio.Event()
        try:
            await _spin(10)  # the wake-up cadence is somewhere in its cycle
            b.send(b"x")
            loop.add_reader(a.fileno(), read.set)
            for waited in range(10):
                if read.is_set():
                    return waited
                await asyncio.sleep(1e-6)
            return None
        finally:
            loop.remove_reader(a.fileno())
            a.close()
            b.close()

    assert run_virtual(main()) == 1  # the iteration after the one that registered it
