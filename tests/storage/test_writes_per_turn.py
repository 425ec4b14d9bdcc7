"""Record writes batched per loop turn (docs/virtual-time.md, "Record writes: one per loop
turn"): a virtual run's lines of one turn go out in one ``write`` at the next turn, so every
record an engine step finished is on disk before the loop's next step; with no running loop,
and in a live run, each line is written as it comes. A signal's stop still saves every
finished record: tests/cli/test_stop_every_command.py (``records.jsonl`` holds the
summary's and the Parquet file's records)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from workbench.data import path as data_path
from workbench.executors.virtual import virtual_executor
from workbench.replay.loops import run_anywhere
from workbench.replay.prepare import coerce_config, prepare
from workbench.replay.session import ReplaySession
from workbench.storage.rundir import RecordWriter, read_jsonl

MOONCAKE = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


async def test_a_turns_lines_go_out_in_one_write_at_the_next_turn(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = RecordWriter(path, per_turn=True)
    turn_over = asyncio.Event()
    asyncio.get_running_loop().call_soon(turn_over.set)  # queued before the writer's flush
    w.write({"n": 1})
    w.write({"n": 2})
    assert _lines(path) == 0 and w.writes == 0  # held through this turn
    await turn_over.wait()  # the next turn: the flush was queued after turn_over.set
    await asyncio.sleep(0)
    assert read_jsonl(path) == [{"n": 1}, {"n": 2}]
    assert (w.count, w.writes) == (2, 1)
    w.write({"n": 3})
    w.close()  # what is pending goes out on close, on every exit path
    assert [d["n"] for d in read_jsonl(path)] == [1, 2, 3]
    assert w.writes == 2


def test_per_turn_without_a_running_loop_writes_each_line_at_once(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with RecordWriter(path, per_turn=True) as w:
        w.write({"n": 1})
        assert read_jsonl(path) == [{"n": 1}]
        w.write({"n": 2})
        assert (w.count, w.writes) == (2, 2)


def test_per_turn_batches_are_cut_at_max_batch(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = RecordWriter(path, per_turn=True, max_batch=2)

    async def three() -> int:
        for n in range(3):
            w.write({"n": n})
        return _lines(path)  # the first two out when the batch filled, in this turn

    assert asyncio.run(three()) == 2
    w.close()
    assert [d["n"] for d in read_jsonl(path)] == [0, 1, 2]


def test_an_unbatched_write_all_is_one_write_per_max_batch(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with RecordWriter(path, max_batch=4) as w:
        w.write_all({"n": n} for n in range(10))
        assert [d["n"] for d in read_jsonl(path)] == list(range(10))  # all out on return
        assert (w.count, w.writes) == (10, 3)


def test_live_writers_still_write_each_record_as_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"

    async def each() -> list[int]:
        w = RecordWriter(path)  # as RecordSinks.open_writers opens them for a live run
        seen = []
        for n in range(3):
            w.write({"n": n})
            seen.append(_lines(path))
        w.close()
        return seen

    assert asyncio.run(each()) == [1, 2, 3]


def test_a_virtual_run_has_each_record_on_disk_before_the_next_step(tmp_path: Path) -> None:
    cfg = coerce_config({"trace": {"path": MOONCAKE, "max_items": 200}, "out_dir": str(tmp_path),
                         "run_id": "v", "arrival": {"mode": "saturated",
                                                    "max_concurrency": 64}})
    run = prepare(cfg, None, virtual=True)
    executor = virtual_executor(run.cfg)
    records = tmp_path / "v" / "records.jsonl"
    seen: list[tuple[int, int]] = []

    def check(done: int) -> None:
        seen.append((done, _lines(records)))

    def progress(done: int, total: int) -> None:
        # a step runs only when nothing is ready (docs/virtual-time.md, "Steps"): this
        # callback runs after the writer's flush (queued first) and before the next step
        asyncio.get_running_loop().call_soon(check, done)

    session = ReplaySession(run.cfg, run.plan, run.run_id,
                            run.manifest(**executor.target.manifest_facts()), executor,
                            progress=progress)
    result = run_anywhere(session.run(None), virtual=True)
    assert result.manifest.status == "completed"
    assert len(seen) == 200
    assert all(on_disk >= done for done, on_disk in seen), seen
    writer = session._writers["records"]
    assert writer.count == 200 and writer.writes < writer.count  # records of one turn together
