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
