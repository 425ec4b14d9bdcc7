"""``trace.offset`` with ``max_items``: a contiguous window of units, in file order,
recorded in the manifest (offset, count, rule, the file's sha256)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from public_data import FIXTURES, needs, public

from workbench.config import RunConfig
from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Spawn, Unit, Workload
from workbench.replay.plan import build_plan
from workbench.replay.prepare import base_manifest, load_workload
from workbench.traces._io import BOM_RULE
from workbench.traces.graph import WINDOW_RULE, window

ROOT = Path(__file__).resolve().parents[2]
# the full public trace (../shared/data; WORKBENCH_MOONCAKE_TRACE names another copy)
MOONCAKE = Path(os.environ.get("WORKBENCH_MOONCAKE_TRACE")
                or public("mooncake/conversation_trace.jsonl"))

# the plan of a window, its manifest's trace section and plan totals, as one digest
DIGEST = """
import hashlib, sys, orjson
from workbench.config import RunConfig
from workbench.replay.plan import build_plan
from workbench.replay.prepare import base_manifest, load_workload
cfg = RunConfig.from_dict({"trace": {"path": sys.argv[1], "offset": 1000, "max_items": 5000}})
w = load_workload(cfg)
plan = build_plan(cfg, w)
m = base_manifest(cfg, w, plan, "run").to_dict()
rows = [(r.round.request_id, r.prompt_len, r.output_len, u.offset_ms)
        for u in plan.units for r in u.rounds]
blob = orjson.dumps({"trace": {k: v for k, v in m["trace"].items() if k != "path"},
                     "plan": m["plan"], "rows": rows}, option=orjson.OPT_SORT_KEYS)
print(rows[0][0], rows[-1][0], len(rows), hashlib.sha256(blob).hexdigest())
"""


def _cfg(path: Path, **trace: object) -> RunConfig:
    return RunConfig.from_dict({"trace": {"path": str(path), **trace}})


def test_window_is_contiguous_in_file_order_and_recorded():
    cfg = _cfg(FIXTURES / "mooncake_sessions.jsonl", offset=1, max_items=2)
    whole = load_workload(_cfg(FIXTURES / "mooncake_sessions.jsonl"))
    w = load_workload(cfg)
    assert [u.unit_id for u in w.units] == [u.unit_id for u in whole.units[1:3]]
    m = base_manifest(cfg, w, build_plan(cfg, w), "r").to_dict()
    assert m["trace"]["window"] == {"offset": 1, "count": 2, "requested": 2,
                                    "units_in_file": len(whole.units), "rule": WINDOW_RULE}
    assert len(m["trace"]["sha256"]) == 64 and m["config"]["trace"]["offset"] == 1


def test_offset_past_the_end_is_a_config_error():
    with pytest.raises(ConfigError, match=r"trace.offset 99 is past the trace's \d+ units"):
        load_workload(_cfg(FIXTURES / "mooncake_sessions.jsonl", offset=99))
    with pytest.raises(ConfigError, match=r"trace\.offset"):
        _cfg(FIXTURES / "mooncake_sessions.jsonl", offset=-1).check()


def test_window_counts_tasks_and_keeps_their_children():
    def unit(uid: str, spawn: Spawn | None = None) -> Unit:
        return Unit(uid, "session", 0.0, (Round(f"{uid}-0", uid, 0, 0.0, 0, 4, 2),
                                          Round(f"{uid}-1", uid, 1, 0.0, 0, 4, 2)), spawn=spawn)

    units = (unit("a"), unit("b"), unit("b.1", Spawn("b", 0)), unit("c"),
             unit("b.1.1", Spawn("b.1", 0)), unit("d"))
    w = window(Workload(units, "test"), 1, 2)
    assert [u.unit_id for u in w.units] == ["b", "b.1", "c", "b.1.1"]
    assert w.meta["window"]["count"] == 2 and w.meta["window"]["units_in_file"] == 4


@needs(MOONCAKE)
def test_offset_1000_max_items_5000_on_the_mooncake_trace_is_rows_1000_to_5999(tmp_path):
    """Request ids are ``mooncake_{row}``: the window is rows 1000..5999, and two
    processes (another hash seed, another cwd) plan it to the same digest."""
    outs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", DIGEST, str(MOONCAKE)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout.split())
    first, last, n, digest = outs[0]
    assert (first, last, n) == ("mooncake_1000", "mooncake_5999", "5000")
    assert outs[1][3] == digest
    cfg = _cfg(MOONCAKE, offset=1000, max_items=5000)
    w = load_workload(cfg)
    window_meta = base_manifest(cfg, w, build_plan(cfg, w), "r").to_dict()["trace"]["window"]
    assert window_meta["offset"] == 1000 and window_meta["count"] == 5000
    assert orjson.loads(orjson.dumps(window_meta))["units_in_file"] == 12031


@needs(MOONCAKE)
def test_the_mooncake_window_replays_rows_1000_to_5999_in_virtual_time(tmp_path):
    """The window replayed (virtual time, the embedded engine): exactly rows 1000..5999 are
    sent, each once, and the run's manifest records the window and the file's sha256."""
    import workbench as wb

    result = wb.simulate({"trace": {"path": str(MOONCAKE), "offset": 1000, "max_items": 5000},
                          "out_dir": str(tmp_path), "executor": {"keep_records": True}})
    ids = sorted(int(r.request_id.removeprefix("mooncake_")) for r in result.records)
    assert ids == list(range(1000, 6000))
    trace = orjson.loads((Path(result.run_dir or "") / "manifest.json").read_bytes())["trace"]
    assert (trace["window"]["offset"], trace["window"]["count"]) == (1000, 5000)
    assert len(trace["sha256"]) == 64


def test_an_azure_window_is_read_as_a_stream_and_recorded(tmp_path):
    """trace.offset/max_items on an azure file reach the reader, which reads only up to the
    window's end (docs/trace-bounds.md, "A window of a large file"); the manifest says so."""
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
        f"2024-05-12 00:00:{i:02d}.000000+00:00,{100 + i},5" for i in range(40)]
    path = tmp_path / "week.csv"
    path.write_text("\n".join(rows) + "\n")
    cfg = RunConfig.from_dict({"trace": {"path": str(path), "offset": 30, "max_items": 4}})
    w = load_workload(cfg)
    assert [u.unit_id for u in w.units] == [f"azure_{i}" for i in range(30, 34)]
    assert [u.arrival_ms for u in w.units] == [30_000.0, 31_000.0, 32_000.0, 33_000.0]
    m = base_manifest(cfg, w, build_plan(cfg, w), "run").to_dict()
    assert m["trace"]["window"]["read"] == "stream"
    assert m["trace"]["window"]["units_in_file"] is None
    bad = {"trace": {"path": str(path), "max_items": 4, "options": {"window": [0, 1]}}}
    with pytest.raises(ConfigError, match="trace option 'window' is no reader option"):
        load_workload(RunConfig.from_dict(bad))


_WEEK = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
    f"2024-05-12 00:00:{i:02d}.000000+00:00,{100 + i},5" for i in range(40)]
_BARE_CR = ("lines end in a bare CR (classic Mac OS line endings): traces take LF or CRLF "
            "(convert: tr '\\r' '\\n' < FILE)")


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(("body", "line", "rule"), [
    ("\r".join(_WEEK).encode() + b"\r", 1, _BARE_CR),
    ("\n".join(_WEEK[:5]).encode() + b"\n\x00" + "\n".join(_WEEK[5:]).encode(), 6,
     "binary data (NUL byte): not a text trace"),
    ("\n".join(_WEEK[:8]).encode() + b"\n\xef\xbb\xbf" + "\n".join(_WEEK).encode(), 9, BOM_RULE),
], ids=["bare-cr", "nul", "joined-bom"])
def test_a_streamed_window_names_what_the_whole_read_names(tmp_path, gz, body, line, rule):
    """A window read as a stream checks its head by the whole-file rules (``bytes_rule``):
    a bare-CR file was one long row, read without a word (docs/trace-bounds.md)."""
    import gzip

    path = tmp_path / ("week.csv.gz" if gz else "week.csv")
    path.write_bytes(gzip.compress(body) if gz else body)
    errors = []
    for trace in ({"max_items": 4}, {}):  # the window streamed, and the whole file read
        cfg = RunConfig.from_dict({"trace": {"path": str(path), "format": "azure", **trace}})
        with pytest.raises(TraceFormatError) as exc:
            load_workload(cfg)
        errors.append((exc.value.line, exc.value.rule))
    assert errors == [(line, rule), (line, rule)]
