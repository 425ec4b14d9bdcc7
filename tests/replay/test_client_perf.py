"""The client's fast paths and self-measurement (issue 7).

Fast paths must give exactly what the plain paths give (SSE framing, batched
chunk parsing, incremental block hashes, batched record writes); the
self-measurement and its ``client_bottleneck`` flag are checked on hand-built
numbers; sharding over two processes must replay the same requests as one.
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import orjson
import pytest

from workbench.backends.openai import ChoicesParser
from workbench.config import RunConfig
from workbench.context.hashing import block_hashes
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.metrics.summary import client_bottleneck, client_stats, summarize
from workbench.records import RunManifest, RunResult
from workbench.replay.measure import SelfMeasure
from workbench.replay.shards import slot_offsets, split_concurrency, split_plan
from workbench.sim.server import serve_sim
from workbench.sse import SSEDecoder
from workbench.storage.rundir import RecordWriter, read_jsonl

# ----------------------------------------------------------------- SSE fast path


def _decode(chunks: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out = [p for c in chunks for p in dec.feed(c)]
    return out + dec.close()


def _stream(rng: random.Random) -> tuple[bytes, list[bytes]]:
    """A stream mixing the common framing with the unusual kinds, and its payloads."""
    parts, want = [], []
    for i in range(40):
        kind = rng.randrange(6)
        if kind == 0:
            parts.append(b": ping\n\n")
        elif kind == 1:
            parts.append(b"event: x\ndata: a%d\ndata: b\n\n" % i)
            want.append(b"a%d\nb" % i)
        elif kind == 2:
            parts.append(b"data: r%d\r\n\r\n" % i)
            want.append(b"r%d" % i)
        else:
            parts.append(b'data: {"i":%d}\n\n' % i)
            want.append(b'{"i":%d}' % i)
    return b"".join(parts), want


@pytest.mark.parametrize("seed", range(30))
def test_sse_any_split_of_mixed_framing_gives_the_same_events(seed: int) -> None:
    rng = random.Random(seed)
    data, want = _stream(rng)
    cuts = sorted(rng.sample(range(1, len(data)), 12))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    assert _decode([data]) == want
    assert _decode(chunks) == want
    assert _decode([data[i : i + 1] for i in range(len(data))]) == want


def test_sse_partial_event_kept_across_reads_then_crlf() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: 1\n") == []
    assert dec.feed(b"\r\n") == [b"1"]
    assert dec.feed(b"data: 2\n\ndata: 3") == [b"2"]
    assert dec.close() == [b"3"]


# ----------------------------------------------------------------- batched chunk parsing


def _chunk(ids: list[int] | None, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "cmpl-1", "choices": []}
    if ids is not None:
        obj["choices"] = [{"index": 0, "text": "x", "token_ids": ids, "finish_reason": finish}]
    if usage:
        obj["usage"] = usage
    return orjson.dumps(obj)


def test_feed_all_equals_feed_per_payload() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 4,
             "prompt_tokens_details": {"cached_tokens": 2}}  # fmt: skip
    payloads = [_chunk([]), _chunk([7]), _chunk([8, 9]), _chunk([10], "length"),
                _chunk(None, usage=usage)]  # fmt: skip
    one, many = ChoicesParser("id"), ChoicesParser("id")
    counts = [len(ids) for p in payloads if (ids := one.feed(p))]
    assert many.feed_all(payloads[:2]) + many.feed_all(payloads[2:]) == counts == [1, 2, 1]
    assert one.finish() == many.finish()


@pytest.mark.parametrize("seed", range(40))
def test_feed_all_over_any_grouping_equals_feed(seed: int) -> None:
    """Random streams (token chunks with 0-3 ids, text-only chunks, finish reasons, a
    usage chunk) grouped into random reads: same counts, ids and outcome as feed."""
    rng = random.Random(seed)
    text_only = rng.random() < 0.3
    payloads = []
    for i in range(rng.randrange(1, 30)):
        fin = rng.choice([None, None, "length", "stop"])
        if text_only:
            choice = {"index": 0, "text": rng.choice(["", "a", "bc"]), "finish_reason": fin}
            payloads.append(orjson.dumps({"id": "c", "choices": [choice]}))
        else:
            payloads.append(_chunk([rng.randrange(100) for _ in range(rng.randrange(4))], fin))
        if i == 0 and rng.random() < 0.5:
            payloads.append(_chunk(None, usage={"prompt_tokens": 1, "completion_tokens": 2}))
    payloads.append(_chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 9}))
    one, many = ChoicesParser("id"), ChoicesParser("id")
    want = [len(ids) for p in payloads if (ids := one.feed(p))]
    got, i = [], 0
    while i < len(payloads):
        n = rng.randrange(1, 6)
        got += many.feed_all(payloads[i : i + n])
        i += n
    assert got == want
    assert many._ids == one._ids and many._finish == one._finish and many._missing == one._missing


def test_feed_one_equals_feed_per_payload() -> None:
    """The one-event-per-read path gives feed's counts, ids, outcome and errors."""
    from workbench.backends.base import BackendError

    usage = {"prompt_tokens": 5, "completion_tokens": 4,
             "prompt_tokens_details": {"cached_tokens": 2}}  # fmt: skip
    text_only = orjson.dumps({"id": "c", "choices": [{"index": 0, "text": "hi"}]})
    payloads = [_chunk([]), _chunk([7]), _chunk([8, 9]), text_only, _chunk([10], "length"),
                _chunk(None, usage=usage)]  # fmt: skip
    one, fast = ChoicesParser("id"), ChoicesParser("id")
    assert [len(ids) if (ids := one.feed(p)) else 0 for p in payloads] == [
        fast.feed_one(p) for p in payloads] == [0, 1, 2, 1, 1, 0]  # fmt: skip
    assert one.finish() == fast.finish()
    with pytest.raises(BackendError, match="boom"):
        fast.feed_one(orjson.dumps({"error": {"message": "boom"}}))
    with pytest.raises(BackendError, match="bad JSON"):
        fast.feed_one(b"{nope")


def _state_after(reads: list[bytes], *, by_events: bool, max_tokens: int = 8):
    """A ``StreamState`` (with its guard) fed ``reads``, read k stamped k."""
    from workbench.backends.overrun import OverrunGuard
    from workbench.backends.stream import StreamState
    from workbench.records import RequestRecord

    rec = RequestRecord("r", "q", 0, "s", 0, "openai", None, 0, 4, max_tokens)
    rec.dispatch_ns = 0
    guard = OverrunGuard(rec, max_tokens, by_events=by_events, prompt_tokens=4)
    state = StreamState(ChoicesParser("id"), rec, guard, 60.0)
    for k, chunk in enumerate(reads):
        if state.cut:
            break
        state.feed(k, chunk)
    return state, rec


def _one_event_reads_like_grouped(seed: int) -> bool:
    """Compare one event per read with a random grouping of the same bytes; True if cut."""
    rng = random.Random(seed)
    text_only = seed % 3 == 0
    events = []
    for _ in range(rng.randrange(100, 140) if text_only else rng.randrange(20, 45)):
        # 8 + 64 = 72 tokens (events of a text-only stream) is the cut limit
        if text_only:
            choice = {"index": 0, "text": rng.choice(["", "a", "bc"]), "finish_reason": None}
            events.append(b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n")
        else:
            ids = [rng.randrange(100) for _ in range(rng.randrange(5))]
            events.append(b"data: " + _chunk(ids) + b"\n\n")
    events.append(b"data: " + _chunk(None, usage={"prompt_tokens": 4, "completion_tokens": 8})
                  + b"\n\n")  # fmt: skip
    one, rec_one = _state_after(events, by_events=text_only)
    grouped, i = [], 0
    while i < len(events):
        n = rng.randrange(1, 6)
        grouped.append(b"".join(events[i : i + n]))
        i += n
    many, rec_many = _state_after(grouped, by_events=text_only)
    assert rec_one.token_counts == rec_many.token_counts
    assert len(rec_one.token_times_ns) == len(rec_one.token_counts)
    assert rec_one.extra == rec_many.extra
    assert one.cut == many.cut and str(one.error) == str(many.error)
    assert type(one.error) is type(many.error)
    assert one.guard.total == many.guard.total and one.guard.seen == many.guard.seen
    return one.cut


def test_one_event_reads_count_and_cut_like_any_grouping() -> None:
    """The one-event-per-read path (SSE framing, parse and overrun guard inline) keeps the
    same counts, and cuts a stream that passes the limit at the same event with the same
    error and flag, as any grouping of the same bytes into reads (ids and text-only
    streams, some cut, some not)."""
    cuts = [_one_event_reads_like_grouped(seed) for seed in range(16)]
    assert any(cuts) and not all(cuts)
    assert any(cuts[::3]) and not all(cuts[1::3])  # text-only (seed % 3 == 0) cut too


@pytest.mark.parametrize("seed", range(24))
def test_small_reads_parsed_event_by_event_equal_feed_all(seed: int, monkeypatch) -> None:
    """A read of a few events is parsed one event at a time (``feed_one``); the record,
    the guard and the error are the ones ``feed_all`` gives for the same reads (forced
    with ``FEED_ONE_MAX = 0``): token chunks, text-only chunks, a usage chunk midway, a
    server error or bad JSON midway, streams past the cut limit."""
    from workbench.backends import stream

    rng = random.Random(seed)
    text_only = seed % 4 == 0
    events = []
    for i in range(rng.randrange(5, 60)):
        if text_only:
            choice = {"index": 0, "text": rng.choice(["", "a"]), "finish_reason": None}
            payload = orjson.dumps({"id": "c", "choices": [choice]})
        else:
            payload = _chunk([rng.randrange(100) for _ in range(rng.randrange(5))],
                             rng.choice([None, None, "length"]))  # fmt: skip
        if i == 3 and seed % 5 == 1:
            payload = _chunk(None, usage={"prompt_tokens": 1, "completion_tokens": 2})
        if i == 7 and seed % 6 == 2:
            payload = orjson.dumps({"error": {"message": "boom"}})
        if i == 9 and seed % 7 == 3:
            payload = b"{nope"
        events.append(b"data: " + payload + b"\n\n")
    reads, i = [], 0
    while i < len(events):
        n = rng.randrange(1, stream.FEED_ONE_MAX + 1)
        reads.append(b"".join(events[i : i + n]))
        i += n
    by_event, rec_a = _state_after(reads, by_events=text_only)
    monkeypatch.setattr(stream, "FEED_ONE_MAX", 0)
    joined, rec_b = _state_after(reads, by_events=text_only)
    assert rec_a.token_counts == rec_b.token_counts
    assert rec_a.token_times_ns == rec_b.token_times_ns
    assert rec_a.extra == rec_b.extra
    assert str(by_event.error) == str(joined.error) and by_event.cut == joined.cut
    assert (by_event.guard.total, by_event.guard.seen) == (joined.guard.total, joined.guard.seen)


def test_a_read_with_tokens_and_an_endless_event_is_cut_on_that_read() -> None:
    """Token events plus the start of an event past the byte bound, in one read: the
    guard's fast path does not skip the unfinished event (cut on this very read)."""
    from workbench.backends.overrun import EVENT_BYTES_FLOOR

    head = b"data: " + _chunk([1]) + b"\n\n" + b"data: " + _chunk([2]) + b"\n\n"
    endless = b"data: " + b"x" * (EVENT_BYTES_FLOOR + 10)
    state, rec = _state_after([b"data: " + _chunk([0]) + b"\n\n", head + endless],
                              by_events=False)  # fmt: skip
    assert state.cut and rec.token_counts == [1, 1, 1]
    assert rec.extra["output_overrun"]["unfinished_event_bytes"] > EVENT_BYTES_FLOOR


def test_sse_one_is_only_taken_for_a_lone_one_line_event() -> None:
    dec = SSEDecoder()
    assert dec.one(b"data: {}\n\n") == b"{}"
    assert dec.one(b"data: a\n\ndata: b\n\n") is None
    assert dec.one(b"data: a\r\n\r\n") is None and dec.one(b"event: x\ndata: a\n\n") is None
    assert dec.feed(b"data: par") == [] and dec.one(b"tial\n\n") is None  # a tail is pending
    assert dec.feed(b"tial\n\n") == [b"partial"]


def test_feed_all_raises_like_feed_on_a_server_error_midway() -> None:
    from workbench.backends.base import BackendError

    bad = orjson.dumps({"error": {"message": "boom"}})
    with pytest.raises(BackendError, match="boom"):
        ChoicesParser("id").feed_all([_chunk([1]), bad, _chunk([2])])
    with pytest.raises(BackendError, match="bad JSON"):
        ChoicesParser("id").feed_all([_chunk([1]), b"{nope"])


# ----------------------------------------------------------------- incremental hashes


def test_block_hashes_with_known_prefix_equal_full_hashing() -> None:
    rng = random.Random(1)
    first = [rng.randrange(1000, 31000) for _ in range(100)]
    grown = first + [rng.randrange(1000, 31000) for _ in range(37)]
    h1 = block_hashes(first, 16)
    assert block_hashes(grown, 16, known=h1[: 100 // 16]) == block_hashes(grown, 16)
    with pytest.raises(ValueError):
        block_hashes(first[:10], 16, known=h1[:1])
    with pytest.raises(ValueError):
        block_hashes([1, -2], 16)


# ----------------------------------------------------------------- batched record writes


def test_batched_writer_holds_lines_until_flush_or_close(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = RecordWriter(path, max_delay_ms=60_000, max_batch=3)

    async def write_two() -> None:  # inside a loop: lines wait for the batch or the timer
        w.write({"n": 1})
        w.write({"n": 2})

    asyncio.run(write_two())
    assert path.read_bytes() == b""
    w.write({"n": 3})  # third line fills the batch
    assert [d["n"] for d in read_jsonl(path)] == [1, 2, 3]
    w.write({"n": 4})  # no running loop: never held
    assert len(read_jsonl(path)) == 4
    w.close()


async def test_batched_writer_timer_flushes_a_quiet_tail(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    w = RecordWriter(path, max_delay_ms=5)
    w.write({"n": 1})
    assert path.read_bytes() == b""
    async with asyncio.timeout(10):
        while not path.read_bytes():
            await asyncio.sleep(0.005)
    assert read_jsonl(path) == [{"n": 1}]
    w.close()


# ----------------------------------------------------------------- self-measurement


def test_self_measure_integrates_in_flight_over_time() -> None:
    m = SelfMeasure()
    m.dispatched(0)  # 1 in flight on [0, 10)
    m.lag(0, 0)
    m.dispatched(10)  # 2 on [10, 20)
    m.lag(10, 4)  # on the wire at 10, due at 4: lag 6
    m.ended(20)
    m.ended(40)  # 1 on [20, 40)
    raw = m.raw()
    assert raw["in_flight_mean"] == pytest.approx((10 + 20 + 20) / 40)
    assert raw["in_flight_peak"] == 2
    assert list(raw["release_lag_ns"]) == [0, 6]
    assert list(raw["in_flight_at_dispatch"]) == [0, 1]


def test_steady_release_lag_leaves_out_the_ramp_up() -> None:
    """A lag counts as steady once the run has held its cap and the request was due after."""
    m = SelfMeasure()
    m.cap = 2
    m.dispatched(0)
    m.lag(1, 0)  # first wave, due at 0: ramp
    m.dispatched(5)  # cap reached at 5
    m.lag(9, 0)  # due at 0, sent at 9: ramp (and the worst)
    m.ended(10)
    m.dispatched(12)
    m.lag(13, 10)  # due when a slot freed at 10 (after 5): steady
    raw = m.raw()
    assert list(raw["release_lag_ns"]) == [1, 9, 3]
    assert list(raw["steady_release_lag_ns"]) == [3]
    uncapped = SelfMeasure()
    uncapped.dispatched(0)
    uncapped.lag(4, 0)
    assert list(uncapped.raw()["steady_release_lag_ns"]) == [4]
    stats = client_stats([raw], requested_concurrency=2)
    assert stats["steady_release_lag_ms"]["count"] == 1
    assert stats["release_lag_ms"]["max"] == pytest.approx(9e-6)


def test_a_wait_for_a_connection_the_server_held_is_not_client_lag() -> None:
    """A request that waited for a connection the server held open after [DONE]: the wait
    is taken out of its release lag and counted apart (docs/metrics.md, "Client")."""
    m = SelfMeasure()
    m.dispatched(0)
    m.lag(1_000_000_005, 0, (1_000_000_000, None, None))  # 1 s of it waiting on the server
    m.dispatched(10)
    m.lag(12, 10)
    m.dispatched(20)
    m.lag(300_000_021, 20, (300_000_000, None, None))
    raw = m.raw()
    assert list(raw["release_lag_ns"]) == [5, 2, 1]
    assert list(raw["held_wait_ns"]) == [1_000_000_000, 300_000_000]
    stats = client_stats([raw, raw], requested_concurrency=None)
    assert stats["held_after_done"] == {"requests": 4, "max_ms": pytest.approx(1000.0)}
    assert stats["client_bottleneck"] is False
    assert "held_after_done" not in client_stats([SelfMeasure().raw()], None)


def test_what_the_clients_did_about_held_bodies_is_summed_over_processes() -> None:
    """``after_done`` (docs/metrics.md, "Client"): each process's counts summed; absent
    when no process saw a body held after [DONE]."""
    a, b = SelfMeasure().raw(), SelfMeasure().raw()
    a["after_done"] = {"held": 1, "dropped_at_done": 5, "resumed": 1}
    b["after_done"] = {"held": 0, "dropped_at_done": 2, "resumed": 0}
    stats = client_stats([a, b], requested_concurrency=None)
    assert stats["after_done"] == {"held": 1, "dropped_at_done": 7, "resumed": 1}
    b["after_done"] = {"held": 0, "dropped_at_done": 0, "resumed": 0}
    assert "after_done" not in client_stats([b, SelfMeasure().raw()], None)


def test_bottleneck_flag_reads_the_steady_lag_when_there_is_one() -> None:
    ramp_only = {"cpu_util": 0.5, "release_lag_ms": {"p99": 80.0},
                 "steady_release_lag_ms": {"p99": 2.0, "count": 500}}  # fmt: skip
    assert client_bottleneck(ramp_only)["client_bottleneck"] is False
    late = {"cpu_util": 0.5, "release_lag_ms": {"p99": 80.0},
            "steady_release_lag_ms": {"p99": 30.0, "count": 500}}  # fmt: skip
    (reason,) = client_bottleneck(late)["client_bottleneck_reasons"]
    assert "steady release lag p99 30.0 ms" in reason


def _raw(lags_ms: list[float], cpu_s: float, wall_s: float, mean: float, peak: int) -> dict:
    return {"release_lag_ns": [round(x * 1e6) for x in lags_ms], "cpu_s": cpu_s,
            "wall_s": wall_s, "in_flight_mean": mean, "in_flight_peak": peak,
            "in_flight_at_dispatch": [peak] * len(lags_ms)}  # fmt: skip


def test_client_stats_pool_processes_and_flag_cpu() -> None:
    a = _raw([0.1] * 99 + [2.0], cpu_s=9.5, wall_s=10.0, mean=15.0, peak=16)
    b = _raw([0.2] * 100, cpu_s=4.0, wall_s=10.0, mean=14.0, peak=16)
    s = client_stats([a, b], requested_concurrency=32)
    assert s["processes"] == 2 and s["requested_concurrency"] == 32
    assert s["in_flight"]["mean"] == pytest.approx(29.0) and s["in_flight"]["peak"] == 32
    assert s["release_lag_ms"]["count"] == 200 and s["release_lag_ms"]["max"] == pytest.approx(2)
    assert s["cpu_s"] == pytest.approx(13.5) and s["cpu_util"] == pytest.approx(0.95)
    assert s["client_bottleneck"] is True
    assert s["client_bottleneck_reasons"] == ["client CPU 95% of a core (>= 90%)"]


def test_client_bottleneck_flag_bounds() -> None:
    ok = {"cpu_util": 0.89, "release_lag_ms": {"p99": 10.0}}
    assert client_bottleneck(ok) == {"client_bottleneck": False, "client_bottleneck_reasons": [],
                                     "server_delays": [], "client_ok_thin": None}
    late = {"cpu_util": 0.2, "release_lag_ms": {"p99": 10.5}}
    flag = client_bottleneck(late)
    assert flag["client_bottleneck"]
    assert "release lag p99 10.5 ms" in flag["client_bottleneck_reasons"][0]
    assert client_bottleneck({"cpu_util": None, "release_lag_ms": {"p99": None}})[
        "client_bottleneck"] is False  # fmt: skip


def test_summarize_carries_the_client_block_from_the_manifest() -> None:
    stats = client_stats([_raw([30.0], 1.0, 10.0, 1.0, 1)], 4)
    out = summarize(RunResult("r", [], manifest=RunManifest.from_dict({"client": stats})))
    assert out["client"]["release_lag_ms"]["p99"] == pytest.approx(30.0)
    assert out["client_bottleneck"] is True
    assert "client" not in summarize(RunResult("r", []))


# ----------------------------------------------------------------- sharding


def test_shard_split_keeps_units_whole_and_file_order() -> None:
    from workbench.replay.plan import build_plan
    from workbench.traces.load import load_trace

    cfg = RunConfig.from_dict({"trace": str(data_path("tracelab/multi_session_example.csv"))})
    plan = build_plan(cfg, load_trace(cfg.trace.path))
    shards = split_plan(plan, 2)
    ords = [[u.ordinal for u in p.units] for p in shards]
    assert sorted(o for s in ords for o in s) == [u.ordinal for u in plan.units]
    assert all(s == sorted(s) for s in ords)
    assert split_concurrency(5, 2) == [3, 2] and split_concurrency(None, 3) == [None] * 3
    assert slot_offsets([3, 2], [10, 10]) == [0, 3]


def test_workers_need_a_slot_each() -> None:
    with pytest.raises(ConfigError, match=r"executor\.workers"):
        RunConfig.from_dict({"executor": {"workers": 3}, "arrival": {"max_concurrency": 2}})
    with pytest.raises(ConfigError, match=r"executor\.workers"):
        RunConfig.from_dict({"executor": {"workers": 0}})


def _key(r) -> tuple:
    return (r.request_id, r.unit_ordinal, r.round_idx, r.planned_prefix_tokens,
            r.planned_input_tokens, r.planned_output_tokens, r.sent_prompt_tokens)  # fmt: skip


@pytest.mark.slow
async def test_two_processes_replay_the_same_requests_as_one(tmp_path: Path) -> None:
    trace = str(data_path("tracelab/multi_session_example.csv"))
    async with serve_sim(speedup=50.0) as sim:
        results = {}
        for workers in (1, 2):
            cfg = RunConfig.from_dict({
                "trace": trace, "target": sim.base_url, "out_dir": str(tmp_path / str(workers)),
                "arrival": {"mode": "saturated", "max_concurrency": 4, "tool_wait_scale": 0.01},
                "executor": {"workers": workers},
            })  # fmt: skip
            async with asyncio.timeout(120):
                results[workers] = await run_async(cfg)
    one, two = results[1], results[2]
    assert all(r.status == "ok" for r in two.records), [r.error for r in two.records]
    assert sorted(map(_key, one.records)) == sorted(map(_key, two.records))
    assert two.manifest.executor["workers"] == 2
    assert two.manifest.client["processes"] == 2
    assert two.manifest.client["in_flight"]["peak"] <= 4
    run_dir = Path(two.run_dir or "")
    assert not (run_dir / "shards").exists()
    assert len(read_jsonl(run_dir / "records.jsonl")) == len(two.records)
    assert len(read_jsonl(run_dir / "lifecycle.jsonl")) == len(two.lifecycle) > 0
    slots = {row["routing_slot"] for row in two.lifecycle}
    assert slots <= set(range(4))  # shard slot ranges stacked, unique run-wide


async def test_keep_records_off_leaves_records_on_disk_only(tmp_path: Path) -> None:
    trace = str(data_path("tracelab/multi_session_example.csv"))
    async with serve_sim(speedup=50.0) as sim:
        cfg = RunConfig.from_dict({
            "trace": trace, "target": sim.base_url, "out_dir": str(tmp_path),
            "arrival": {"mode": "saturated", "tool_wait_scale": 0.01},
            "executor": {"keep_records": False},
        })  # fmt: skip
        async with asyncio.timeout(60):
            result = await run_async(cfg)
    assert result.records == [] and result.lifecycle == []
    run_dir = Path(result.run_dir or "")
    on_disk = read_jsonl(run_dir / "records.jsonl")
    n_rounds = len(Path(trace).read_text().splitlines()) - 1
    assert len(on_disk) == n_rounds and all(d["status"] == "ok" for d in on_disk)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())
    assert summary["ok"] == n_rounds and summary["client"]["release_lag_ms"]["count"] == n_rounds


def test_resends_on_stale_connections_are_summed_over_processes() -> None:
    """``resent_stale`` (docs/metrics.md, "Client"): requests sent once more after a reused
    connection died before any byte of their answer, summed; absent when none was."""
    a, b = SelfMeasure().raw(), SelfMeasure().raw()
    a["resent_stale"], b["resent_stale"] = 2, 1
    assert client_stats([a, b], None)["resent_stale"] == 3
    b["resent_stale"] = a["resent_stale"] = 0
    assert "resent_stale" not in client_stats([a, b], None)


@pytest.mark.parametrize(("count", "flagged"), [(3, True), (10, True), (99, True), (100, False),
                                                (None, False)])
def test_a_lag_p99_of_few_releases_says_how_few(count: int | None, flagged: bool) -> None:
    """A release lag p99 over fewer releases than resolve a p99 (100) is read off the
    largest lags: the verdict's reason, the client table's caption and the run's headline
    say over how many (``p99 62.0 ms of 10 releases``), as a headline's TTFT does."""
    from workbench.metrics.distribution import resolution
    from workbench.report.headline import client_verdict
    from workbench.report.tables import client_evidence

    lag = {"p99": 62.0, **({"count": count} if count is not None else {})}
    stats = {"cpu_util": 0.2, "release_lag_ms": lag}
    (reason,) = client_bottleneck(stats)["client_bottleneck_reasons"]
    said = [reason, client_evidence(stats),
            client_verdict({"client": {**stats, **client_bottleneck(stats)}}) or ""]
    for text in said:
        assert "release lag p99 62.0 ms" in text, text
        m = re.search(r"p99 62\.0 ms of (\d+) releases?", text)
        assert bool(m) == flagged, text
        if m:
            assert int(m.group(1)) == count and count < (resolution(99) or 0)
