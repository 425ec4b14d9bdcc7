"""Session graphs replayed: sub-agents start on their trigger, parents wait for them,
an agent task holds one admission slot, streams can be capped — against the embedded
engine over HTTP and in virtual time (same semantics, stable digest).

The graph (raw session CSV with the graph columns, docs/session-graphs.md)::

    p   3 rounds; after round 0 ends: c1, c2, c3 (fan-out 3, joined before round 1);
        when round 1 starts: s (round_start, 5 ms later, joined before round 2)
    c1  2 rounds; when its round 0 starts: g (nested, detached: no round waits, c1's
        end does)
    q   a second root (1 round) arriving with p
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

from workbench.backends.transport import HTTP_CLIENTS
from workbench.config import RunConfig
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.records import RequestRecord, RunResult
from workbench.report.canonical import canonical_report, report_digest
from workbench.traces.load import load_trace

HEADER = ("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,"
          "parent_session_id,spawn_round,spawn_trigger,spawn_delay_ms,join_round\n")
ROWS = """p,0,0,64,8,2,,,,,
p,1,72,32,8,1,,,,,
p,2,112,16,4,0,,,,,
c1,0,0,48,6,1,p,0,,,
c1,1,54,16,6,0,,,,,
c2,0,0,40,12,0,p,0,round_end,,
c3,0,0,40,4,0,p,0,,0,1
s,0,0,24,4,0,p,1,round_start,5,2
g,0,0,32,16,0,c1,0,round_start,,none
q,0,0,32,4,0,,,,,
"""
ENGINE = {"num_blocks": 512, "block_size": 16}


@pytest.fixture
def graph_csv(tmp_path: Path) -> Path:
    p = tmp_path / "graph.csv"
    p.write_text(HEADER + ROWS)
    return p


def _cfg(path: Path, target: object = None, **arrival: object) -> RunConfig:
    d: dict[str, object] = {"trace": {"path": str(path)},
                            "arrival": {"mode": "saturated", **arrival}, "backend": "openai"}
    if target is not None:
        d["target"] = target
    return RunConfig.from_dict(d)


def _by_unit(result: RunResult) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in sorted(result.records, key=lambda r: r.round_idx):
        if not r.warmup:
            out[r.session_id].append(r)
    return out


def _ends(result: RunResult) -> dict[str, int]:
    """Each unit's lifecycle end: its own rounds and every descendant done."""
    return {row["unit_id"]: row["end_ns"] for row in result.lifecycle}


def _peak(records: list[RequestRecord]) -> int:
    events = sorted([(r.dispatch_ns, 1) for r in records] + [(r.end_ns, -1) for r in records],
                    key=lambda e: (e[0], e[1]))
    cur = peak = 0
    for _, step in events:
        cur += step
        peak = max(peak, cur)
    return peak


def check_graph_semantics(result: RunResult, tol_ns: int, streams_free: bool = True) -> None:
    """``tol_ns``: how late a start may be; ``streams_free`` False (a stream cap): a
    start may wait for a stream, so only the order is checked."""
    u, ends = _by_unit(result), _ends(result)
    assert all(r.status == "ok" for rs in u.values() for r in rs)
    assert sorted(u) == ["c1", "c2", "c3", "g", "p", "q", "s"]
    p0, p1, p2 = u["p"]
    # fan-out: each child starts when p's round 0 ended (no delay), in file order
    for c in ("c1", "c2", "c3"):
        assert p0.end_ns <= u[c][0].dispatch_ns <= p0.end_ns + tol_ns, c
    order = sorted(("c1", "c2", "c3"), key=lambda c: (u[c][0].dispatch_ns, c))
    assert order == ["c1", "c2", "c3"]
    # the join: p's round 1 never before its children (and g, inside c1) ended
    assert p1.dispatch_ns >= max(ends["c1"], ends["c2"], ends["c3"], ends["g"])
    assert p1.dispatch_ns >= p0.end_ns + 2 * 1_000_000  # its own tool wait too
    assert ends["c1"] >= ends["g"]  # a detached grandchild still ends before its parent
    # nested, on request start: g starts with c1's round 0 request, not after it
    assert u["c1"][0].dispatch_ns <= u["g"][0].dispatch_ns
    # (live: c1's 6-token request may end before g's task runs on a loaded host: tol_ns)
    assert u["g"][0].dispatch_ns < u["c1"][0].end_ns + tol_ns or not streams_free
    # on request start with a 5 ms delay: s is due 5 ms after p's round 1 starts
    assert p1.dispatch_ns + 5_000_000 <= u["s"][0].dispatch_ns <= p1.dispatch_ns + 5_000_000 \
        + tol_ns
    assert p2.dispatch_ns >= ends["s"]
    # graph fields on every record of the tree; none on q (a plain root)
    assert {(r.extra["task_id"], r.extra["depth"]) for r in u["g"]} == {("p", 2)}
    assert "task_id" not in u["q"][0].extra
    # the task ends with its last descendant
    assert ends["p"] >= max(ends[c] for c in ("c1", "c2", "c3", "s", "g"))


def test_graph_is_read_with_its_links(graph_csv):
    w = load_trace(graph_csv)
    spawn = {u.unit_id: u.spawn for u in w.units}
    assert spawn["p"] is None and spawn["q"] is None
    assert (spawn["c1"].parent_id, spawn["c1"].round_idx, spawn["c1"].join_round) == ("p", 0, 1)
    assert (spawn["s"].trigger, spawn["s"].delay_ms, spawn["s"].join_round) == \
        ("round_start", 5.0, 2)
    assert spawn["g"].join_round is None and spawn["g"].line == 10


def test_virtual_time_semantics_cap_and_stable_digest(graph_csv):
    cfg = _cfg(graph_csv)
    a = simulate(cfg, engine=ENGINE)
    check_graph_semantics(a, tol_ns=1_000_000)
    recs = [r for r in a.records if not r.warmup]
    assert _peak(recs) == 4  # c1, c2, c3 and g at once (q ended during p round 0)
    b = simulate(cfg, engine=ENGINE)
    assert report_digest(canonical_report(a)) == report_digest(canonical_report(b))


def test_one_task_one_slot_and_the_stream_cap(graph_csv):
    """max_concurrency 1: q (released with p) starts only when p's whole tree ended;
    max_streams 2: never more than 2 requests in flight, the graph order kept."""
    res = simulate(_cfg(graph_csv, max_concurrency=1), engine=ENGINE)
    u, ends = _by_unit(res), _ends(res)
    assert u["q"][0].dispatch_ns >= ends["p"]
    assert res.manifest.peak_active_units == 1
    capped = simulate(_cfg(graph_csv, max_streams=2), engine=ENGINE)
    recs = [r for r in capped.records if not r.warmup]
    assert _peak(recs) == 2
    check_graph_semantics(capped, tol_ns=10**12, streams_free=False)


@pytest.mark.parametrize("http", HTTP_CLIENTS)
async def test_live_embedded_engine_keeps_the_graph(graph_csv, sim, http):
    cfg = RunConfig.from_dict({**_cfg(graph_csv, sim.base_url).to_dict(),
                               "executor": {"http": http}})
    async with asyncio.timeout(60):
        result = await run_async(cfg)
    check_graph_semantics(result, tol_ns=200_000_000)  # a loaded 2-core host: 200 ms
    # a round_start child is timed from its parent's request as the client stamped it
    # going out, not from when the round began (its prompt built, a stream taken):
    # that gap made s start a few microseconds early on a loaded host
    u, life = _by_unit(result), {row["unit_id"]: row for row in result.lifecycle}
    assert life["s"]["released_ns"] == u["p"][1].dispatch_ns
    assert life["g"]["released_ns"] == u["c1"][0].dispatch_ns
    assert u["s"][0].extra["spawn"]["delay_ms"] == 5.0


def test_round_start_child_waits_for_its_parent_request_to_go_out(tmp_path):
    """Two long requests hold both streams when a's round 1 begins: its request waits
    for a stream, and so does x, due 1 ms after that request went out, not 1 ms after
    the round began (both would otherwise take the two streams freed at one instant)."""
    p = tmp_path / "wait.csv"
    p.write_text(HEADER + "a,0,0,16,2,0,,,,,\na,1,18,16,4,0,,,,,\n"
                 "x,0,0,16,4,0,a,1,round_start,1,none\n"
                 "b,0,0,32,64,0,,,,,\nc,0,0,32,64,0,,,,,\n")
    res = simulate(_cfg(p, max_streams=2), engine=ENGINE)
    u, life = _by_unit(res), {row["unit_id"]: row for row in res.lifecycle}
    a1, x = u["a"][1], u["x"][0]
    assert a1.dispatch_ns >= min(u["b"][0].end_ns, u["c"][0].end_ns)  # it waited
    assert life["x"]["released_ns"] == a1.dispatch_ns
    assert x.dispatch_ns >= a1.dispatch_ns + 1_000_000
    assert x.extra["spawn"]["delay_ms"] == 1.0


def test_dangling_parent_and_cycle_are_trace_errors(tmp_path):
    from workbench.errors import TraceFormatError

    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "a,0,0,4,2,0,,,,,\nb,0,0,4,2,0,zz,0,,,\n")
    with pytest.raises(TraceFormatError, match=r":3: .*parent 'zz' is not in the trace"):
        load_trace(bad)
    bad.write_text(HEADER + "a,0,0,4,2,0,b,0,,,\nb,0,0,4,2,0,a,0,,,\n")
    with pytest.raises(TraceFormatError, match=r":2: .*own ancestor"):
        load_trace(bad)
    bad.write_text(HEADER + "a,0,0,4,2,0,,,,,\nb,0,0,4,2,0,a,3,,,\n")
    with pytest.raises(TraceFormatError, match=r":3: .*spawns at round 3 of 'a', which has 1"):
        load_trace(bad)


def test_agent_metrics_and_the_cap_that_never_bound(graph_csv):
    from workbench.metrics import summarize
    from workbench.metrics.agents import per_task

    res = simulate(_cfg(graph_csv, max_concurrency=10), engine=ENGINE)
    s = summarize(res)
    tasks = s["agent_tasks"]
    assert tasks["tasks"] == 1 and tasks["units"]["max"] == 6  # p, c1, c2, c3, s, g
    assert tasks["width"]["max"] == 4 and tasks["depth"]["max"] == 2  # p's 4; p > c1 > g
    assert set(tasks["ttft_ms_by_depth"]) == {"0", "1", "2"}
    assert tasks["ttft_ms_by_depth"]["2"]["count"] == 1
    (task,) = per_task(res.records, res.lifecycle)
    assert task["engine_ms"] + task["tool_ms"] == pytest.approx(task["makespan_ms"])
    assert 0 < task["engine_ms"] < task["makespan_ms"]
    conc = s["concurrency"]
    assert conc["peak_tasks"] == 2 and conc["peak_streams"] == 4  # p and q; c1..c3 + g
    assert conc["warnings"] == ["units never reached max_concurrency 10 (at most 2 at "
                                "once): the cap changed nothing"]
    bound = summarize(simulate(_cfg(graph_csv, max_concurrency=1), engine=ENGINE))
    assert bound["concurrency"]["peak_tasks"] == 1 and bound["concurrency"]["warnings"] == []


def test_swimlane_draws_the_tree(graph_csv):
    from workbench.report.plots import _graph_lanes, plot

    res = simulate(_cfg(graph_csv), engine=ENGINE)
    ordinal = {row["unit_id"]: row["unit_ordinal"] for row in res.lifecycle}
    order, labels, parents, depth = _graph_lanes(res, sorted(ordinal.values()))
    names = [labels[u].strip() for u in order]
    assert names == ["p", "└ c1", "└ g", "└ c2", "└ c3", "└ s", "q"]
    assert labels[ordinal["g"]].startswith("    └ ")  # depth 2
    assert parents[ordinal["g"]] == ordinal["c1"] and parents[ordinal["c1"]] == ordinal["p"]
    fig = plot(res, "sessions")
    ax = fig.axes[0]
    assert [t.get_text().strip() for t in ax.get_yticklabels()] == names
    assert len(ax.collections) >= 7 + 6  # a bar row per lane, a connector per child
    # depth shows in the bars' color, not only in the labels' indent
    assert depth[ordinal["g"]] == 2 and depth[ordinal["c1"]] == 1 and depth[ordinal["p"]] == 0
    from matplotlib.colors import to_rgba

    from workbench.report.plots import DEPTH_COLORS

    bars = [c for c in ax.collections if type(c).__name__ == "BrokenBarHCollection"
            or c.__class__.__name__ == "PolyCollection"]
    colors = {tuple(to_rgba(c.get_facecolor()[0])) for c in bars if len(c.get_facecolor())}
    assert {tuple(to_rgba(DEPTH_COLORS[d])) for d in (0, 1, 2)} <= colors
    # p's round 1 waited for c1, c2, c3 past its own 2 ms tool wait: drawn as a join
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "waiting for sub-agents (join)" in legend
    assert {"round at depth 0 (a root)", "round at depth 2 (sub-agent)"} <= set(legend)


def test_session_budget_truncates_marks_and_excludes(tmp_path):
    from workbench.metrics import per_session, summarize

    p = tmp_path / "long.csv"
    p.write_text("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
                 + "".join(f"long,{k},{k * 40},32,8,400\n" for k in range(6))
                 + "short,0,0,32,8,0\n")
    res = simulate(_cfg(p, session_budget_s=1.0), engine=ENGINE)
    rows = {r["unit_id"]: r for r in res.lifecycle}
    assert rows["long"]["reason"] == "budget" and rows["long"]["truncated"]
    assert 1 < rows["long"]["rounds_done"] < 6  # ~400 ms per round and wait: cut at 1 s
    assert rows["short"]["reason"] == "completed"
    last = max(r.dispatch_ns for r in res.records if r.session_id == "long")
    assert last - rows["long"]["admitted_ns"] < 1e9  # no round started past the budget
    assert list(per_session(res)["session_id"]) == ["short"]
    assert per_session(res, truncated=True)["budget_truncated"].tolist() == [True, False]
    assert summarize(res)["session_budget"] == {"budget_s": 1.0, "truncated_units": 1,
                                                "units": ["long"]}


def test_shards_keep_trees_whole_and_closed_loop_repeats_them(graph_csv):
    from workbench.metrics import summarize

    sharded = simulate(RunConfig.from_dict({
        "trace": {"path": str(graph_csv)},
        "arrival": {"mode": "saturated", "max_concurrency": 4},
        "executor": {"workers": 2}}), engine=ENGINE)
    check_graph_semantics(sharded, tol_ns=1_000_000)
    looped = simulate(_cfg(graph_csv, mode="closed-loop", max_concurrency=2, duration_s=3),
                      engine=ENGINE)
    per_unit: dict[str, int] = defaultdict(int)
    for r in looped.records:
        per_unit[r.session_id] += 1
    loops = per_unit["q"]
    assert loops > 1 and per_unit["p"] == 3 * loops and per_unit["g"] == loops
    assert summarize(looped)["agent_tasks"]["tasks"] == loops  # one task per repeat of p


async def test_stream_cap_is_fifo_and_a_cancelled_waiter_passes_its_turn_on():
    from workbench.replay.graph import StreamCap

    cap = StreamCap(1)
    assert await cap.acquire() is False  # free: no wait
    got: list[str] = []

    async def take(name: str) -> None:
        await cap.acquire()
        got.append(name)

    a, b, c = (asyncio.ensure_future(take(n)) for n in "abc")
    await asyncio.sleep(0)
    b.cancel()  # b leaves the queue; a and c keep their places
    await asyncio.sleep(0)
    cap.release()  # to a
    await a
    cap.release()  # to c (b is gone)
    await c
    assert got == ["a", "c"] and cap.active == 1 and cap.peak == 1
    cap.release()
    assert cap.active == 0


def test_the_report_has_a_table_of_agent_tasks(graph_csv):
    from workbench.data import path as data_path
    from workbench.metrics import summarize
    from workbench.report.sections import RunReport
    from workbench.report.tables import AGENT_ROWS

    res = simulate(_cfg(graph_csv), engine=ENGINE)
    agents = summarize(res)["agent_tasks"]
    table = RunReport(res).table("agents")
    df = table.frame
    for key, words in AGENT_ROWS:
        assert df.loc[words, "p50"] == agents[key]["p50"]
        assert df.loc[words, "max"] == agents[key]["max"]
    assert df.loc["depth: sub-agent levels below the root", "max"] == 2  # g under c1 under p
    assert table.caption.startswith(f"Agent tasks ({agents['tasks']})")
    flat = RunReport(simulate({"trace": {"path": str(data_path(
        "tracelab/multi_session_example.csv")), "max_items": 2}}))
    assert flat.table("agents").caption == "No sub-agents: every unit was its own agent task"
    assert flat.table("agents").frame.empty
