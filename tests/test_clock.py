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
