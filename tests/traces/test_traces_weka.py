"""The weka reader (captured coding-agent conversations; docs/weka-traces.md): counts equal
the file's, sub-agent markers as session graphs, namespaced hash ids and the warm prefix,
the timing strategies' arithmetic, pairs, the shapes a trace comes in, and its errors."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from workbench.data import path as data_path
from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Workload
from workbench.traces import weka
from workbench.traces.load import detect_format, load_trace, source_sha256

SAMPLE = Path(data_path("weka/cc_traces_sample.jsonl"))


def req(t: float, n_in: int, out: int, hashes: list[int], *, kind: str = "n",
        think: float | None = 0.0, api: float | None = 1.0,
        **extra: Any) -> dict[str, Any]:  # fmt: skip
    r = {"t": t, "type": kind, "model": "m", "in": n_in, "out": out, "hash_ids": hashes,
         "input_types": ["text"], "output_types": ["text"], "stop": "end_turn", **extra}
    if think is not None:
        r["think_time"] = think
    if api is not None:
        r["api_time"] = api
    return r


def conv(cid: str, reqs: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"id": cid, "models": ["m"], "block_size": 64, "hash_id_scope": "local",
            "tool_tokens": 64, "system_tokens": 64, "requests": reqs, **top}


def write(tmp: Path, *convs: dict[str, Any], name: str = "t.jsonl") -> Path:
    p = tmp / name
    p.write_bytes(b"\n".join(orjson.dumps(c) for c in convs) + b"\n")
    return p


def marker(t: float, agent: str, reqs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"t": t, "type": "subagent", "agent_id": agent, "subagent_type": "Explore",
            "models": ["h"], "tool_tokens": 0, "system_tokens": 0, "requests": reqs, **extra}


# -- the bundled sample: counts per conversation equal the file's --------------------------


def _file_agents(obj: dict[str, Any], uid: str) -> dict[str, list[dict[str, Any]]]:
    """Every agent of a conversation as the file has it: unit id -> its own requests."""
    out = {uid: [r for r in obj["requests"] if r["type"] != "subagent"]}
    for r in obj["requests"]:
        if r["type"] == "subagent":
            out.update(_file_agents(r, f"{uid}::sa:{r['agent_id']}"))
    return out


def test_bundled_sample_counts_equal_the_files() -> None:
    w = load_trace(SAMPLE)
    assert w.fmt == "weka" and w.meta["detected_format"] == "weka" and w.block_size == 64
    units = {u.unit_id: u for u in w.units}
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert w.meta["conversations"] == len(lines) == 28
    expected_units = 0
    for obj in lines:
        for uid, reqs in _file_agents(obj, obj["id"]).items():
            expected_units += 1
            u = units[uid]
            assert len(u.rounds) == len(reqs), uid
            for r, want in zip(u.rounds, reqs, strict=True):
                assert r.prompt_len == want["in"]
                assert r.output_len == max(want["out"], 1)
                assert len(r.hash_ids or ()) == len(want["hash_ids"]) == want["in"] // 64
    assert len(w.units) == expected_units
    assert w.meta["subagents"] == sum(u.spawn is not None for u in w.units) == 12
    assert sum(len(u.rounds) for u in w.units) == sum(
        len(reqs) for obj in lines for reqs in _file_agents(obj, obj["id"]).values())


def test_sample_subagents_hang_where_their_markers_stand() -> None:
    w = load_trace(SAMPLE)
    units = {u.unit_id: u for u in w.units}
    obj = json.loads(SAMPLE.read_text().splitlines()[0])  # trace_0277: 4 sub-agents
    seen = 0
    for item in obj["requests"]:
        if item["type"] != "subagent":
            seen += 1
            continue
        sp = units[f"trace_0277::sa:{item['agent_id']}"].spawn
        assert sp is not None and sp.parent_id == "trace_0277"
        assert (sp.round_idx, sp.trigger, sp.delay_ms, sp.join_round) == (
            seen - 1, "round_end", 0.0, seen)
    assert units["trace_0277::sa:agent_001"].meta["model"].startswith("claude-haiku")


# -- graphs --------------------------------------------------------------------------------


def test_markers_side_by_side_before_first_after_last_and_nested(tmp_path: Path) -> None:
    inner = marker(1.0, "g", [req(0.0, 128, 4, [50, 51])])
    c = conv("c", [
        marker(0.0, "early", [req(0.0, 128, 4, [40, 41])]),
        req(0.0, 256, 8, [1, 2, 3, 4]),
        marker(5.0, "a", [req(0.0, 128, 4, [10, 11]), inner, req(3.0, 192, 4, [10, 11, 12])]),
        marker(6.0, "b", [req(0.0, 128, 4, [20, 21])]),
        marker(6.0, "b", [req(0.0, 128, 4, [30, 31])]),  # a repeated agent_id stays apart
        req(20.0, 320, 8, [1, 2, 3, 4, 5]),
        marker(30.0, "late", [req(0.0, 128, 4, [60, 61])]),
        marker(31.0, "empty", []),
    ])
    w = load_trace(write(tmp_path, c))
    sp = {u.unit_id: u.spawn for u in w.units}
    assert [u.unit_id for u in w.units] == [
        "c", "c::sa:early", "c::sa:a", "c::sa:a::sa:g", "c::sa:b", "c::sa:b.2", "c::sa:late"]
    assert sp["c::sa:early"] is not None and (sp["c::sa:early"].round_idx,
                                              sp["c::sa:early"].trigger,
                                              sp["c::sa:early"].join_round) == (0, "round_start",
                                                                                None)
    for uid in ("c::sa:a", "c::sa:b", "c::sa:b.2"):
        s = sp[uid]
        assert s is not None and (s.parent_id, s.round_idx, s.trigger, s.join_round) == (
            "c", 0, "round_end", 1)
    g = sp["c::sa:a::sa:g"]
    assert g is not None and (g.parent_id, g.round_idx, g.join_round) == ("c::sa:a", 0, 1)
    late = sp["c::sa:late"]
    assert late is not None and (late.round_idx, late.join_round) == (1, None)
    assert w.meta["empty_subagents"] == 1 and w.meta["subagents_before_first_request"] == 1


def test_a_conversation_of_markers_only_replays_its_sub_agents(tmp_path: Path) -> None:
    """A conversation whose root has no request of its own, only sub-agents (what a
    capture writes when the root's only request failed after its sub-agent ran): each
    sub-agent is a session of its own from the conversation's start, its own markers
    nested under it. One with no request anywhere is refused, naming its line."""
    c = conv("c", [marker(0.0, "a", [req(0.0, 64, 1, [1]),
                                     marker(1.0, "g", [req(0.0, 64, 1, [1])]),
                                     req(2.0, 128, 1, [1, 2])]),
                   marker(5.0, "b", [req(0.0, 64, 1, [3])])])
    w = load_trace(write(tmp_path, c))
    units = {u.unit_id: u for u in w.units}
    assert list(units) == ["c::sa:a", "c::sa:a::sa:g", "c::sa:b"]
    assert units["c::sa:a"].spawn is None and units["c::sa:b"].spawn is None
    g = units["c::sa:a::sa:g"].spawn
    assert g is not None and (g.parent_id, g.round_idx, g.join_round) == ("c::sa:a", 0, 1)
    assert w.meta["conversations_of_subagents_only"] == 1
    assert "subagents_before_first_request" not in w.meta  # there is no first request
    assert [len(u.rounds) for u in w.units] == [2, 1, 1]
    empty = write(tmp_path, conv("e", [marker(0.0, "a", [])]), conv("z", []), name="e.jsonl")
    with pytest.raises(TraceFormatError, match="has no request") as e:
        load_trace(empty)
    assert e.value.line == 1


# -- hash ids ------------------------------------------------------------------------------


def test_local_ids_are_private_to_their_conversation_global_ones_shared(tmp_path: Path) -> None:
    a = conv("a", [req(0.0, 256, 4, [1, 2, 3, 4])])
    b = conv("b", [req(0.0, 256, 4, [1, 2, 3, 4])])
    w = load_trace(write(tmp_path, a, b), warm_prefix_pct=0.0)
    ha, hb = (u.rounds[0].hash_ids for u in w.units)
    assert ha is not None and hb is not None and not set(ha) & set(hb)
    assert w.units[1].rounds[0].prefix_len == 0  # nothing planned as shared
    assert all(0 < h < 2**63 for h in ha + hb)  # numpy's int64 still takes them
    g = load_trace(write(tmp_path, {**a, "hash_id_scope": "global"},
                         {**b, "hash_id_scope": "global"}, name="g.jsonl"),
                   warm_prefix_pct=0.0)  # fmt: skip
    assert g.units[0].rounds[0].hash_ids == g.units[1].rounds[0].hash_ids == (1, 2, 3, 4)
    assert g.units[1].rounds[0].prefix_len == 256


def test_namespace_is_the_conversations_not_the_files(tmp_path: Path) -> None:
    a = conv("a", [req(0.0, 256, 4, [1, 2, 3, 4])])
    b = conv("b", [req(0.0, 256, 4, [1, 2, 3, 4])])
    alone = load_trace(write(tmp_path, b, name="b.jsonl"), warm_prefix_pct=0.0)
    both = load_trace(write(tmp_path, a, b, name="ab.jsonl"), warm_prefix_pct=0.0)
    assert alone.units[0].rounds[0].hash_ids == both.units[1].rounds[0].hash_ids


def test_a_namespace_clash_moves_the_later_conversation(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weka, "namespace", lambda cid: 7)
    a = conv("a", [req(0.0, 256, 4, [1, 2, 3, 4])])
    b = conv("b", [req(0.0, 256, 4, [1, 2, 3, 4]), req(1.0, 320, 4, [1, 2, 3, 4, 5])])
    w = load_trace(write(tmp_path, a, b), warm_prefix_pct=0.0)
    ha = set(w.units[0].rounds[0].hash_ids or ())
    hb = [set(r.hash_ids or ()) for r in w.units[1].rounds]
    assert not ha & (hb[0] | hb[1]) and hb[0] < hb[1]
    assert w.meta["namespace_clashes"] == 1
    assert w.units[1].rounds[1].prefix_len == 256  # b's own prefix still chains


def test_warm_prefix_shares_the_leading_blocks_of_every_agent(tmp_path: Path) -> None:
    # tool + system = 512 tokens at most (b); 50 %: 256 tokens = 4 blocks shared
    a = conv("a", [req(0.0, 640, 4, list(range(1, 11))),
                   marker(1.0, "s", [req(0.0, 384, 4, [90, 91, 92, 93, 94, 95])]),
                   req(2.0, 704, 4, list(range(1, 12)))])
    b = conv("b", [req(0.0, 200, 4, [7, 8, 9])], tool_tokens=256, system_tokens=256)
    w = load_trace(write(tmp_path, a, b))
    assert w.meta["reader"]["warm_prefix_tokens"] == 256
    u = {x.unit_id: x for x in w.units}
    r0, r1 = u["a"].rounds
    assert r0.hash_ids is not None and r1.hash_ids is not None
    assert r0.hash_ids[:4] == r1.hash_ids[:4] == (-1, -2, -3, -4)
    assert r0.hash_ids[4] > 0 and r1.hash_ids[:10] == r0.hash_ids
    assert u["a::sa:s"].rounds[0].hash_ids[:4] == (-1, -2, -3, -4)  # type: ignore[index]
    assert u["a::sa:s"].rounds[0].prefix_len == 256  # the warm blocks, planned as hits
    # b's prompt holds 3 whole blocks of the 4: those three are shared
    assert u["b"].rounds[0].hash_ids == (-1, -2, -3)
    assert u["b"].rounds[0].prefix_len == 192
    off = load_trace(write(tmp_path, a, b, name="off.jsonl"), warm_prefix_pct=0)
    assert all(h > 0 for x in off.units for r in x.rounds for h in r.hash_ids or ())


# -- timing --------------------------------------------------------------------------------


def _waits(w: Workload, uid: str) -> list[float]:
    return [r.tool_wait_after_ms for r in next(u for u in w.units if u.unit_id == uid).rounds]


TIMED = conv("c", [
    req(0.0, 128, 4, [1, 2], think=0.0, api=2.0),
    req(10.0, 192, 4, [1, 2, 3], think=7.5, api=3.0),
    marker(15.0, "s", [req(0.0, 64, 1, [9])]),
    req(40.0, 256, 4, [1, 2, 3, 4], think=20.0, api=1.0),
    req(50.0, 320, 4, [1, 2, 3, 4, 5], think=None, api=None),  # an old request: no fields
])


@pytest.mark.parametrize(("opts", "want"), [
    ({}, [7500.0, 20000.0, 10000.0, 0.0]),  # think-only (default); t-difference fallback
    ({"timing": "original"}, [10000.0, 25000.0, 10000.0, 0.0]),  # after a marker: from it
    ({"timing": "api-scaled", "api_time_scale": 0.5}, [8500.0, 25000.0, 10000.0, 0.0]),
    ({"timing": "original", "max_delay_s": 12}, [10000.0, 12000.0, 10000.0, 0.0]),
], ids=["think-only", "original", "api-scaled", "capped"])
def test_timing_strategies(tmp_path: Path, opts: dict[str, Any], want: list[float]) -> None:
    w = load_trace(write(tmp_path, TIMED), **opts)
    assert _waits(w, "c") == want
    assert w.meta["reader"]["timing"] == opts.get("timing", "think-only")
    assert w.meta["timing_sources"]["original"] >= 1  # the request without think_time


def test_the_manifest_records_the_readers_options(tmp_path: Path) -> None:
    from workbench.executors.virtual import simulate

    p = write(tmp_path, TIMED)
    res = simulate({"trace": {"path": str(p), "options": {"timing": "original"}},
                    "arrival": {"mode": "saturated"}})
    reader = res.manifest.trace["reader"]
    assert reader["timing"] == "original" and reader["warm_prefix_pct"] == 0.5
    assert res.manifest.trace["sha256"] == source_sha256(p)


def test_pairs_kept_or_collapsed(tmp_path: Path) -> None:
    c = conv("c", [req(0.0, 256, 8, [1, 2, 3, 4], kind="n", api=1.0),
                   req(2.0, 260, 0, [1, 2, 3, 4], kind="s", think=1.0, api=4.0),
                   req(9.0, 320, 4, [1, 2, 3, 4, 5], think=3.0)])
    kept = load_trace(write(tmp_path, c))
    assert [r.prompt_len for r in kept.units[0].rounds] == [256, 260, 320]
    assert kept.meta["clamped_output_tokens"] == 1
    one = load_trace(write(tmp_path, c, name="c2.jsonl"), pairs="collapse")
    rounds = one.units[0].rounds
    assert [(r.prompt_len, r.output_len) for r in rounds] == [(260, 8), (320, 4)]
    assert rounds[0].tool_wait_after_ms == 3000.0 and one.meta["collapsed_pairs"] == 1


# -- shapes and detection ------------------------------------------------------------------


def _shape(w: Workload) -> list[tuple[Any, ...]]:
    return [(u.unit_id, u.rounds, u.meta, u.spawn and dataclasses.replace(u.spawn, line=0))
            for u in w.units]


def test_one_file_a_folder_an_array_and_a_jsonl_read_alike(tmp_path: Path) -> None:
    lines = SAMPLE.read_bytes().splitlines()[:3]
    folder = tmp_path / "traces"
    folder.mkdir()
    for i, line in enumerate(lines):
        (folder / f"trace_{i}.json").write_bytes(line)
    (folder / "README.md").write_text("not a trace")  # ignored: not .json/.jsonl
    array = tmp_path / "all.json"
    array.write_bytes(b"[\n" + b",\n".join(lines) + b"\n]\n")
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(lines[0]), indent=2))
    jsonl = tmp_path / "all.jsonl"
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    ws = [load_trace(p) for p in (folder, array, jsonl)]
    assert all(w.fmt == "weka" for w in ws)
    assert _shape(ws[0]) == _shape(ws[1]) == _shape(ws[2])  # the lines differ, nothing else
    assert detect_format(folder) == detect_format(pretty) == "weka"
    assert load_trace(pretty).units == load_trace(folder / "trace_0.json").units
    assert ws[0].meta["reader"]["files"] == 3
    assert source_sha256(folder) != source_sha256(jsonl)
    before = source_sha256(folder)
    (folder / "trace_2.json").write_bytes(lines[2] + b" ")  # one byte more: another trace
    assert source_sha256(folder) != before


def test_aliases_name_the_format(tmp_path: Path) -> None:
    p = write(tmp_path, TIMED)
    assert load_trace(p, fmt="kv-cache-tester").units == load_trace(p, fmt="agentx").units


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(("edit", "words"), [
    (lambda c: c["requests"][1].pop("in"), "requests[1].missing field 'in'"),
    (lambda c: c["requests"][0].update({"in": "12"}), "requests[0].in must be an integer"),
    (lambda c: c["requests"][0].update({"hash_ids": [1, 2, 3]}), "3 ids of 64 tokens"),
    (lambda c: c["requests"][0].update({"hash_ids": [1, "x"]}), "each id must be an integer"),
    (lambda c: c["requests"][0].update({"type": "x"}), "type must be 's'"),
    (lambda c: c["requests"][0].update({"think_time": -1}), "think_time must be >= 0"),
    (lambda c: c["requests"][0].update({"t": float("nan")}), "invalid JSON"),
    (lambda c: c.update({"hash_id_scope": "galaxy"}), "hash_id_scope must be one of"),
    (lambda c: c.pop("block_size"), "missing field 'block_size'"),
    (lambda c: c["requests"][2].update({"requests": "x"}), "requests[2].requests must be a list"),
    (lambda c: c["requests"][0].update({"hash_ids": [2**40]}), "outside [0, 2^23)"),
], ids=["missing-in", "string-in", "too-many-ids", "bad-id", "bad-type", "negative-think",
        "nan", "scope", "block-size", "marker-requests", "huge-local-id"])
def test_bad_fields_name_file_line_and_rule(tmp_path: Path, edit: Any, words: str) -> None:
    good = conv("ok", [req(0.0, 64, 1, [1])])
    bad = json.loads(json.dumps(TIMED))
    edit(bad)
    p = tmp_path / "t.jsonl"
    text = json.dumps(good) + "\n" + json.dumps(bad) + "\n"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, fmt="weka")
    assert e.value.path == str(p) and e.value.line == 2
    assert words in e.value.rule


def test_duplicate_ids_and_block_sizes_across_files_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(conv("x", [req(0.0, 64, 1, [1])])))
    (folder / "b.json").write_text(json.dumps(conv("x", [req(0.0, 64, 1, [1])])))
    with pytest.raises(TraceFormatError,
                       match=r"duplicate conversation id 'x' \(also at .*a.json:1\)") as e:
        load_trace(folder)
    assert e.value.path == str(folder / "b.json")
    (folder / "b.json").write_text(json.dumps(conv("y", [req(0.0, 64, 1, [1])], block_size=32)))
    with pytest.raises(TraceFormatError, match="block_size 32 differs from 64"):
        load_trace(folder)


def test_empty_folder_and_unknown_options(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    with pytest.raises(TraceFormatError, match="a directory; a folder is read as one trace"):
        load_trace(tmp_path / "e")
    with pytest.raises(TraceFormatError,
                       match=r"folder has no \.json, \.jsonl, \.json\.gz, \.jsonl\.gz files"):
        load_trace(tmp_path / "e", fmt="weka")
    p = write(tmp_path, TIMED)
    with pytest.raises(ConfigError, match="unknown option"):
        load_trace(p, timeing="original")
    with pytest.raises(ConfigError, match="timing must be one of"):
        load_trace(p, timing="fast")
    with pytest.raises(ConfigError, match="warm_prefix_pct must be a number in"):
        load_trace(p, warm_prefix_pct=2)


@pytest.mark.parametrize(("first", "line", "words"), [
    (b"", 0, "file is empty"),
    (b'{"id": "x", "requests": [', 1, "invalid JSON"),
], ids=["empty", "cut"])
def test_a_broken_first_file_of_a_folder_is_named(tmp_path: Path, first: bytes, line: int,
                                                  words: str) -> None:
    """A folder's format is sniffed on its first file by name: when that one is empty or
    cut, the error names it and its own rule. It said "none of its 3 files is one" of a
    folder whose other files were all good, naming no file."""
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.json").write_bytes(first)
    for name in ("b", "c"):
        (folder / f"{name}.json").write_text(json.dumps(conv(name, [req(0.0, 64, 1, [1])])))
    with pytest.raises(TraceFormatError) as e:
        load_trace(folder)
    assert (e.value.path, e.value.line) == (str(folder / "a.json"), line)
    assert words in e.value.rule
    assert "none of its" not in e.value.rule


def test_unknown_fields_are_named_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c = conv("c", [req(0.0, 64, 1, [1], priority=3)], owner="me")
    with caplog.at_level(logging.WARNING):
        w = load_trace(write(tmp_path, c))
    assert w.meta["unknown_fields"] == ["owner", "requests[].priority"]
    assert "requests[].priority (line 1)" in caplog.text


# -- what stats says of the graphs ---------------------------------------------------------


def test_graph_summary_counts_tasks_depth_fanout_and_detached(tmp_path: Path) -> None:
    from workbench.traces.graph import graph_summary

    inner = marker(1.0, "g", [req(0.0, 128, 4, [50, 51])])
    c = conv("c", [req(0.0, 256, 8, [1, 2, 3, 4]),
                   marker(5.0, "a", [req(0.0, 128, 4, [10, 11]), inner,
                                     req(3.0, 192, 4, [10, 11, 12])]),
                   marker(6.0, "b", [req(0.0, 128, 4, [20, 21])]),
                   req(20.0, 320, 8, [1, 2, 3, 4, 5]),
                   marker(30.0, "late", [req(0.0, 128, 4, [60, 61])])])
    d = conv("d", [req(0.0, 64, 1, [1])])
    w = load_trace(write(tmp_path, c, d))
    assert graph_summary(w.units) == {"agent_tasks": 2, "subagents": 4, "max_depth": 2,
                                      "max_fanout": 2, "detached_subagents": 1}


def test_stats_prints_the_agents_of_a_graph_trace(capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.cli import main

    assert main(["stats", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "format  weka (detected)" in out
    lines = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1) for ln in out.splitlines()
                 if ln.startswith("  ") and re.search(r"\S\s{2,}\S", ln))
    assert (lines["agent tasks"], lines["sub-agents"], lines["sub-agent depth (max)"],
            lines["sub-agents of one round (max)"]) == ("28", "12", "1", "3")
    assert main(["stats", str(data_path("tracelab/multi_session_example.csv"))]) == 0
    assert "\nagents\n" not in capsys.readouterr().out  # no graph: no agents section


def test_subagents_recorded_start_at_their_offsets_and_join_after_their_recorded_end() -> None:
    """trace_0277 (sample line 1): agent_001 (t 79.2, 59.75 s) ends before the parent's
    request 1 (t 228); agent_002 and agent_003 (t 183.9 and 211.3, 164 s and 192 s) end
    after request 6 (t 347) and are joined by request 7 (t 763); agent_004 (t 723.5,
    338 s) ends after the last request (t 818): nobody waits. AIPerf's joins, the same."""
    w = load_trace(SAMPLE, subagents="recorded")
    sp = {u.unit_id: u.spawn for u in w.units if u.unit_id.startswith("trace_0277::")}
    got = {uid.rsplit(":", 1)[-1]: (s.round_idx, s.trigger, round(s.delay_ms), s.join_round)
           for uid, s in sp.items() if s is not None}
    # request 0 at t 0 took 18.78 s: agent_001's marker is 60.444 s after it ended
    assert got == {"agent_001": (0, "round_end", 60444, 1),
                   "agent_002": (0, "round_end", 165126, 7),
                   "agent_003": (0, "round_end", 192567, 7),
                   "agent_004": (6, "round_end", 338903, None)}
    assert w.meta["subagents_not_joined"] == 1 and w.meta["reader"]["subagents"] == "recorded"
    with pytest.raises(ConfigError, match="subagents must be one of wait, recorded"):
        load_trace(SAMPLE, subagents="never")


def test_a_recorded_end_without_duration_reads_either_time_convention(tmp_path: Path) -> None:
    relative = marker(10.0, "r", [req(0.0, 64, 1, [5]), req(30.0, 64, 1, [5], api=2.0)])
    absolute = marker(10.0, "a", [req(10.0, 64, 1, [6]), req(40.0, 64, 1, [6], api=2.0)])
    c = conv("c", [req(0.0, 64, 1, [1], api=1.0), relative, absolute,
                   req(41.0, 64, 1, [1]), req(42.0, 64, 1, [1]), req(43.0, 64, 1, [1])])
    w = load_trace(write(tmp_path, c), subagents="recorded")
    joins = {u.unit_id: u.spawn.join_round for u in w.units if u.spawn is not None}
    # relative: ends at 10 + 30 + 2 = 42 (request 2); absolute: 40 + 2 = 42 too
    assert joins == {"c::sa:r": 2, "c::sa:a": 2}


def test_gzip_files_and_folders_read_as_their_content(tmp_path: Path) -> None:
    import gzip

    lines = SAMPLE.read_bytes().splitlines()[:2]
    plain = tmp_path / "two.jsonl"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    packed = tmp_path / "two.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert detect_format(packed) == "weka"
    assert _shape(load_trace(packed)) == _shape(load_trace(plain))
    folder = tmp_path / "f"
    folder.mkdir()
    for i, line in enumerate(lines):
        (folder / f"c{i}.json.gz").write_bytes(gzip.compress(line))
    assert detect_format(folder) == "weka"
    assert _shape(load_trace(folder)) == _shape(load_trace(plain))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed.read_bytes()[:-20])
    with pytest.raises(TraceFormatError, match="gzip data is cut short"):
        load_trace(cut, fmt="weka")


def test_untyped_entries_and_requests_without_hash_ids(tmp_path: Path) -> None:
    """Upstream's replayer: a request without ``type`` streams, an entry with
    ``requests`` is a sub-agent; a request without ``hash_ids`` has no shared blocks."""
    r0 = req(0.0, 256, 4, [1, 2, 3, 4])
    del r0["type"]
    r1 = req(5.0, 320, 4, [])
    del r1["hash_ids"]
    m = marker(2.0, "s", [req(0.0, 64, 1, [9])])
    del m["type"]
    w = load_trace(write(tmp_path, conv("c", [r0, m, r1])))
    assert [u.unit_id for u in w.units] == ["c", "c::sa:s"]
    assert w.units[0].rounds[1].hash_ids == () and w.units[0].rounds[1].prefix_len == 0
    assert w.meta["untyped_entries"] == 2 and w.meta["requests_without_hash_ids"] == 1
    from workbench.executors.virtual import simulate

    res = simulate({"trace": str(tmp_path / "t.jsonl"), "arrival": {"mode": "saturated"}})
    assert [r.prompt_tokens for r in sorted(res.records, key=lambda r: r.request_id)] == [
        256, 320, 64]


def _cut(text: str, at: str) -> str:
    """``text`` up to (not including) the last occurrence of ``at``."""
    return text[: text.rindex(at)]


@pytest.mark.parametrize("shape", ["pretty", "array", "pretty-array"])
def test_a_cut_document_names_where_it_breaks_and_why(tmp_path: Path, shape: str) -> None:
    """A whole-file document cut short (a copy interrupted, a download that stopped): the
    error names the file, the line and column where the JSON stops parsing, and says the
    document does not parse there. It said the file was "one JSON object written over
    several lines, not JSON lines: weka takes one JSON object a line" — a rule weka does
    not have (it reads pretty-printed files and arrays) — and named line 1."""
    c = [conv(n, [req(0.0, 128, 1, [1, 2]), req(1.0, 192, 1, [1, 2, 3])]) for n in "ab"]
    text = {"pretty": json.dumps(c[0], indent=2), "array": json.dumps(c),
            "pretty-array": json.dumps(c, indent=2)}[shape]
    cut = _cut(text, '"hash_ids"')
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(conv("first", [req(0.0, 64, 1, [1])])))
    (folder / "b.json").write_text(cut)
    for path in (folder, folder / "b.json"):
        with pytest.raises(TraceFormatError) as e:
            load_trace(path, fmt="weka")
        assert e.value.path == str(folder / "b.json")
        assert e.value.line == cut.count("\n") + 1, e.value
        assert "takes one JSON object a line" not in e.value.rule
        col = len(cut) - cut.rfind("\n")
        assert f"line {e.value.line} column {col}" in e.value.rule, e.value.rule
        assert "invalid JSON" in e.value.rule and "cut short" in e.value.rule


def test_an_array_names_the_line_its_conversation_starts_on(tmp_path: Path) -> None:
    """An error or a duplicate in a pretty-printed array names the line its element starts
    on (it named the array's first line for every conversation)."""
    good = [conv(n, [req(0.0, 128, 1, [1, 2])]) for n in "abc"]
    bad = conv("d", [req(0.0, 128, 1, [1, 2])])
    bad["requests"][0]["out"] = "many"
    p = tmp_path / "all.json"
    p.write_text(json.dumps([*good, bad], indent=2))
    starts = [n for n, text in enumerate(p.read_text().splitlines(), 1) if text == "  {"]
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, fmt="weka")
    assert e.value.line == starts[3] and "out must be an integer" in e.value.rule, e.value
    p.write_text(json.dumps([*good, good[1]], indent=2))
    with pytest.raises(TraceFormatError) as e:
        load_trace(p, fmt="weka")
    assert e.value.line == starts[3], e.value
    assert e.value.rule.endswith(f"(also at line {starts[1]})"), e.value


def test_a_folders_hidden_files_are_not_read(tmp_path: Path) -> None:
    """A hidden file (``.x.json``: an editor's or a sync tool's) is left out of a folder,
    as detection and the folder's sha256 leave it out: it was read, so the workload could
    change while the trace's recorded identity did not."""
    from workbench.traces.load import source_sha256

    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(conv("a", [req(0.0, 64, 1, [1])])))
    sha = source_sha256(folder)
    (folder / ".b.json").write_text(json.dumps(conv("b", [req(0.0, 64, 1, [1])])))
    assert [u.unit_id for u in load_trace(folder).units] == ["a"]
    assert source_sha256(folder) == sha


def test_a_folders_identity_is_the_files_its_reader_reads(tmp_path: Path) -> None:
    """A README or notes beside a folder's trace files are not read, so they do not change
    the trace's recorded sha256 (they did); a trace file does, and the run records the
    same identity as ``source_sha256`` gives with the format named."""
    from workbench.executors.virtual import simulate

    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(conv("a", [req(0.0, 64, 1, [1])])))
    sha = source_sha256(folder)
    (folder / "README.md").write_text("# captured on the 3rd\n")
    (folder / "notes.txt").write_text("n\n")
    assert source_sha256(folder) == source_sha256(folder, "weka") == sha
    res = simulate({"trace": {"path": str(folder)}, "arrival": {"mode": "saturated"}})
    assert res.manifest.trace["sha256"] == sha
    (folder / "b.jsonl").write_text(json.dumps(conv("b", [req(0.0, 64, 1, [1])])) + "\n")
    assert source_sha256(folder) != sha
