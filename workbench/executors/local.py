"""The in-process executor: the plan played by one ``Runner`` on this process's loop."""

from __future__ import annotations

import asyncio

from workbench.backends.base import make_codec
from workbench.backends.transport import Transport, TransportOptions
from workbench.clock import WallClock
from workbench.context.tokens import run_pool
from workbench.executors.kinds import EXECUTORS
from workbench.replay.outcome import ShardOutcome, play_shard
from workbench.replay.runner import build_runner
from workbench.replay.session import ReplaySession, connection_warmer, watch_stop
from workbench.replay.target import Target


class LocalExecutor:
    """One transport and one runner in this process (``executor.kind = "local"``)."""

    target = None  # the config's

    def open_files(self, session: ReplaySession) -> None:
        session.open_writers()

    async def play(
        self, session: ReplaySession, target: Target, stop: asyncio.Event | None
    ) -> None:
        s = session
        b = s.cfg.backend
        # fresh per run (the chat codec keeps state)
        codec = make_codec(b.name, **b.codec_options())
        clock = WallClock()
        pool = run_pool(s.cfg.seed, b.token_salt, s.run_id)
        options = TransportOptions.of_run(s.cfg, target.base_url)
        async with Transport(options, clock) as transport:
            await s.check_target(transport, codec, pool, target)
            block_size = await s.block_size(target)
            runner = build_runner(
                s.cfg, s.plan, run_id=s.run_id, codec=codec, sender=transport,
                clock=clock, pool=pool, sink=s.on_record,
                lifecycle_sink=s.on_lifecycle, block_size=block_size,
            )
            s.facts.block_size = block_size
            scraper = s.sampler(target, clock)
            watcher = asyncio.ensure_future(watch_stop(stop, runner)) if stop else None
            outcome = None
            try:
                if scraper is not None:
                    await scraper.start()
                outcome = await play_shard(runner, warm=connection_warmer(s.cfg, transport))
            finally:
                if watcher is not None:
                    watcher.cancel()
                if scraper is not None:
                    await scraper.stop()
                    s.keep_scrape(scraper)
                s.conclude([outcome or ShardOutcome.of(runner)])


EXECUTORS.add("local", lambda _cfg: LocalExecutor())
