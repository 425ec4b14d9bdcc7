"""Session graphs from the readers: a TraceLab sub-agent contained in its parent's
``Task`` call (or named by ``parent_session_id``) is read as a tree; a Dynamo trace
with dependency edges round-trips read → replay → export → read with the same graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.errors import TraceFormatError
from workbench.executors.virtual import simulate
from workbench.report.dynamo_export import export_dynamo
from workbench.traces.load import load_trace


def _tl_row(sid: str, k: int, t0: str, t1: str, tools: list[dict] | None = None,
            **extra: object) -> dict:
    return {"provider": "claude", "project": "proj", "session_id": sid, "round_index": k,
            "model": "m", "prefix_tokens": 0 if k == 0 else 40, "newly_append_tokens": 20,
            "output_tokens": 8,
            "timing_events": [{"event_type": "user_message", "timestamp": t0},
                              {"event_type": "text", "timestamp": t1}],
            "tools": tools or [], **extra}


def _task(t0: str, t1: str, name: str = "Task") -> dict:
    return {"tool_name": name, "tool_call_id": "t", "emitted_at": t0, "result_at": t1}


def _write(tmp_path: Path, rows: list[dict], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


T = "2026-06-01T05:40:{:02d}.000Z"


def _nested_rows() -> list:
    """main's Task call (2 s .. 30 s) holds sub (3 s .. 20 s), whose own Task call holds
    subsub's first round (the innermost call wins over main's)."""
    return [
        _tl_row("main", 0, T.format(0), T.format(1), [_task(T.format(2), T.format(30))]),
        _tl_row("main", 1, T.format(31), T.format(32)),
        _tl_row("sub", 0, T.format(3), T.format(4), [_task(T.format(5), T.format(15))]),
        _tl_row("sub", 1, T.format(16), T.format(20)),
        _tl_row("subsub", 0, T.format(6), T.format(9)),
    ]


def test_tracelab_contained_subagent_is_a_tree(tmp_path):
    rows = [
        *_nested_rows(),
        # a Bash call holding another session: no sub-agent tool, so no link
        _tl_row("other", 0, T.format(40), T.format(41),
                [_task(T.format(42), T.format(55), name="Bash")]),
        _tl_row("inside-bash", 0, T.format(43), T.format(44)),
    ]
    w = load_trace(_write(tmp_path, rows))
    spawn = {u.unit_id: u.spawn for u in w.units}
    assert spawn["main"] is None and spawn["other"] is None and spawn["inside-bash"] is None
    sub, subsub = spawn["sub"], spawn["subsub"]
    assert (sub.parent_id, sub.round_idx, sub.trigger, sub.join_round) == \
        ("main", 0, "round_end", 1)
    assert sub.delay_ms == pytest.approx(1000.0)  # 3 s start - the call emitted at 2 s
    assert (subsub.parent_id, subsub.round_idx, subsub.join_round) == ("sub", 0, 1)
    assert sub.line == 3 and subsub.line == 5


def test_tracelab_parent_field_wins_and_dangling_is_an_error(tmp_path):
    rows = [_tl_row("main", 0, T.format(0), T.format(1)),
            _tl_row("main", 1, T.format(10), T.format(11)),
            _tl_row("kid", 0, T.format(12), T.format(13), parent_session_id="main")]
    spawn = {u.unit_id: u.spawn for u in load_trace(_write(tmp_path, rows)).units}
    assert (spawn["kid"].parent_id, spawn["kid"].round_idx, spawn["kid"].join_round) == \
        ("main", 1, None)
    rows[2]["parent_session_id"] = "nobody"
    with pytest.raises(TraceFormatError,
                       match=r":3: unit '.*': parent_session_id 'nobody'.*dangling"):
        load_trace(_write(tmp_path, rows, "bad.jsonl"))


def _dyn(sid: str, rid: str, at: int, total: float, length: int, hashes: list[int],
         parent: str | None = None, dep: dict | None = None) -> dict:
    ctx: dict = {"session_id": sid}
    if parent:
        ctx["parent_session_id"] = parent
    if dep:
        ctx["dependency"] = dep
    return {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "agent_context": ctx,
            "request": {"request_id": rid, "output_tokens": 4, "request_received_ms": at,
                        "total_time_ms": total,
                        "replay": {"trace_block_size": 16, "input_length": length,
                                   "input_sequence_hashes": hashes}}}


def _graph(w) -> dict:
    return {u.unit_id: None if u.spawn is None else
            (u.spawn.parent_id, u.spawn.round_idx, u.spawn.trigger,
             round(u.spawn.delay_ms, 6), u.spawn.join_round)
            for u in w.units}


def test_dynamo_dependency_edges_round_trip(tmp_path):
    base = 1_700_000_000_000
    rows = [
        _dyn("p", "p0", base, 100, 32, [1, 2]),
        _dyn("c1", "c1-0", base + 100, 50, 20, [7, 8], "p",
             {"relation": "subagent", "parent_request_id": "p0", "trigger": "request_end",
              "delay_ms": 0, "join_request_id": "p1"}),
        _dyn("c2", "c2-0", base + 20, 50, 20, [9, 10], "p",
             {"relation": "subagent", "parent_request_id": "p0", "trigger": "request_start",
              "delay_ms": 20, "join_request_id": "p2"}),
        _dyn("g", "g-0", base + 150, 10, 17, [11, 12], "c1",
             {"relation": "subagent", "parent_request_id": "c1-0", "trigger": "request_end",
              "delay_ms": 3.5}),
        _dyn("p", "p1", base + 400, 100, 48, [1, 2, 3]),
        _dyn("p", "p2", base + 600, 100, 64, [1, 2, 3, 4]),
    ]
    src = _write(tmp_path, rows, "dyn.jsonl")
    first = load_trace(src)
    assert _graph(first) == {
        "p": None,
        "c1": ("p", 0, "round_end", 0.0, 1),
        "c2": ("p", 0, "round_start", 20.0, 2),
        "g": ("c1", 0, "round_end", 3.5, None),
    }
    cfg = RunConfig.from_dict({"trace": {"path": str(src)},
                               "arrival": {"mode": "saturated"}})
    result = simulate(cfg, engine={"num_blocks": 512, "block_size": 16})
    assert all(r.status == "ok" for r in result.records)
    out = export_dynamo(result, tmp_path / "export.jsonl", 16)
    again = load_trace(out)
    assert _graph(again) == _graph(first)
    assert [len(u.rounds) for u in again.units] == [len(u.rounds) for u in first.units]


def test_dynamo_parent_by_timing_and_refusals(tmp_path):
    from public_data import FIXTURES

    spawn = {u.unit_id: u.spawn for u in load_trace(FIXTURES / "dynamo_trace.jsonl").units}
    # run-b's first request (500 ms) came as a1 (0 + 500 ms) ended; a3 (3000 ms) is the
    # first of run-a's requests received after run-b's last ended (2000 ms)
    b = spawn["run-b"]
    assert (b.parent_id, b.round_idx, b.trigger, b.delay_ms, b.join_round) == \
        ("run-a", 0, "round_end", 0.0, 2)
    base = 1_700_000_000_000
    bad = [_dyn("p", "p0", base, 10, 16, [1]),
           _dyn("c", "c0", base + 20, 10, 16, [2], "p", {"relation": "handoff",
                                                          "parent_request_id": "p0"})]
    with pytest.raises(TraceFormatError, match=r":2: dependency.relation 'handoff'"):
        load_trace(_write(tmp_path, bad, "rel.jsonl"))
    bad[1] = _dyn("c", "c0", base + 20, 10, 16, [2], "zz")
    with pytest.raises(TraceFormatError, match=r":2: .*dangling parent"):
        load_trace(_write(tmp_path, bad, "dangling.jsonl"))


def test_tracegen_carries_a_graph_in_a_sidecar_and_nothing_else_changes(tmp_path):
    """The canonical CSV stays request-factory's format; the links go to
    ``<stem>.graph.json`` (only when there are any) and read back into the same graph."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replay"))
    from test_session_graphs import HEADER, ROWS

    from workbench.traces.canonical import graph_sidecar_path
    from workbench.workloads.materialize import tracegen

    src = tmp_path / "graph.csv"
    src.write_text(HEADER + ROWS)
    plain = tmp_path / "plain.csv"
    plain.write_text(HEADER.rsplit(",parent", 1)[0] + "\n" + "".join(
        ",".join(line.split(",")[:6]) + "\n" for line in ROWS.splitlines()))
    with_graph = tracegen(src, tmp_path / "g.csv")
    without = tracegen(plain, tmp_path / "p.csv")
    assert with_graph.csv_path.read_bytes() == without.csv_path.read_bytes()
    assert not graph_sidecar_path(without.csv_path).exists()
    side = json.loads(graph_sidecar_path(with_graph.csv_path).read_text())
    assert {row["session_id"] for row in side} == {"c1", "c2", "c3", "s", "g"}
    again = load_trace(with_graph.csv_path)
    assert _graph(again) == _graph(load_trace(src))
    # a consumer that ignores the sidecar sees every session as a root
    assert all(u.spawn is None for u in load_trace(with_graph.csv_path, sidecars=False).units)


# -- joins inferred from timing wait for the child's whole subtree ----------------------
def test_tracelab_nested_contained_subagents_replay_as_a_tree(tmp_path):
    """main's Task call holds sub, whose own Task call holds subsub: read as main → sub →
    subsub, and replayed so that main's next round starts only after sub *and* subsub
    ended (a join waits for the child's whole subtree), in virtual time."""
    path = _write(tmp_path, [*_nested_rows(), _tl_row("subsub", 1, T.format(10), T.format(14))])
    assert _graph(load_trace(path)) == {
        "main": None, "sub": ("main", 0, "round_end", 1000.0, 1),
        "subsub": ("sub", 0, "round_end", 1000.0, 1)}
    res = simulate(RunConfig.from_dict({"trace": str(path), "arrival": {"mode": "saturated"}}),
                   engine={"num_blocks": 256, "block_size": 16})
    recs = {(r.session_id, r.round_idx): r for r in res.records}
    ends = {row["unit_id"]: row["end_ns"] for row in res.lifecycle}
    assert all(r.status == "ok" for r in res.records)
    assert recs[("main", 1)].dispatch_ns >= ends["sub"] >= ends["subsub"]
    assert ends["subsub"] >= recs[("subsub", 1)].end_ns
    assert recs[("sub", 1)].dispatch_ns >= ends["subsub"]  # sub's own join on subsub


def test_tracelab_named_child_is_joined_after_its_grandchild(tmp_path):
    """Rule 1 (``parent_session_id``): the join is the parent's first round that
    started after the child's whole subtree ended — here after the grandchild (15 s),
    so round 2 (20 s), not round 1 (10 s), which began while the grandchild ran."""
    rows = [_tl_row("main", 0, T.format(0), T.format(1)),
            _tl_row("main", 1, T.format(10), T.format(11)),
            _tl_row("main", 2, T.format(20), T.format(21)),
            _tl_row("kid", 0, T.format(2), T.format(5), parent_session_id="main"),
            _tl_row("grandkid", 0, T.format(3), T.format(15), parent_session_id="kid")]
    spawn = {u.unit_id: u.spawn for u in load_trace(_write(tmp_path, rows)).units}
    assert (spawn["kid"].parent_id, spawn["kid"].round_idx, spawn["kid"].join_round) == \
        ("main", 0, 2)
    assert (spawn["grandkid"].parent_id, spawn["grandkid"].join_round) == ("kid", None)


def test_dynamo_timed_join_waits_for_the_grandchild(tmp_path):
    """Without ``dependency``: c (150..250 ms) spawned g (200..800 ms); p's join on c is
    its first request received after 800 ms (p2 at 900), not after c's own end (p1 at
    300), since in replay the join waits for c's whole subtree."""
    base = 1_700_000_000_000
    rows = [_dyn("p", "p0", base, 100, 16, [1]),
            _dyn("p", "p1", base + 300, 10, 16, [1]),
            _dyn("p", "p2", base + 900, 10, 16, [1]),
            _dyn("c", "c0", base + 150, 100, 16, [2], "p"),
            _dyn("g", "g0", base + 200, 600, 16, [3], "c")]
    g = _graph(load_trace(_write(tmp_path, rows)))
    assert g["c"] == ("p", 0, "round_end", 50.0, 2)
    assert g["g"] == ("c", 0, "round_start", 50.0, None)
