"""Documented bounds (docs/trace-bounds.md) and strict parsing, in all 8 formats.

Absurd but rule-conforming values (two billion tokens, 1e30 ms) are one
``TraceFormatError`` naming path, line and the bound; numbers are ASCII
(``1_28`` and full-width digits are not integers); ids stay unique. The
property tests corrupt valid files of every format (byte edits, and numbers
swapped for absurd ones) and check that a load either raises
``TraceFormatError`` and nothing else, or returns a workload inside the bounds.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from corruption import OPS, corrupt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from public_data import BUNDLED, FIXTURES, REPO

from workbench import load_trace, tracegen
from workbench.config import RunConfig
from workbench.errors import TraceFormatError
from workbench.records import Workload
from workbench.replay.plan import build_plan
from workbench.traces import bounds, canonical
from workbench.workloads.trace_stats import trace_stats

H = canonical.HEADER_LINE
BIG = 2_000_000_000

VALID: dict[str, tuple[str, bytes]] = {
    "session": (".csv", (BUNDLED / "tracelab" / "multi_session_example.csv").read_bytes()),
    "session-execution-v2": (".csv", (
        f"{H}\n"
        "session_0_round_000000,0,0,0.000000,0,512,64,100.000000\n"
        "session_0_round_000001,0,1,0.000000,576,32,16,0.000000\n"
        "session_1_round_000000,1,0,250.500000,0,128,8,0.000000\n").encode()),
    "independent": (".csv", (FIXTURES / "independent_requests.csv").read_bytes()),
    "azure": (".csv", (FIXTURES / "serving-traces/azure_2024_notebook.csv").read_bytes()),
    "burstgpt": (".csv", (FIXTURES / "serving-traces/burstgpt_constructed.csv").read_bytes()),
    "mooncake": (".jsonl", (FIXTURES / "mooncake_sessions.jsonl").read_bytes()),
    "tracelab": (".jsonl", b"\n".join(
        (BUNDLED / "tracelab" / "round_trace.sanitized.jsonl").read_bytes().splitlines()[:6])),
    "trajectory": (".jsonl", (
        b'{"schema_version":1,"trajectory_id":"a","requests":[{"prompt_tokens":30,'
        b'"output_tokens":5},{"prompt_tokens":40,"output_tokens":6,"delay_after_ms":3}]}\n'
        b'{"schema_version":1,"trajectory_id":"b","requests":[{"prompt_tokens":9,'
        b'"output_tokens":2},{"prompt_tokens":4,"output_tokens":1,"reset_before":true}]}\n')),
    "abench": (".jsonl", (FIXTURES / "abench_sessions.jsonl").read_bytes()),
    "dynamo": (".jsonl", (FIXTURES / "dynamo_trace.jsonl").read_bytes()),
}
FORMATS = sorted(VALID)


def assert_within_bounds(w: Workload) -> None:
    """What the docs promise about every loaded workload, checked independently."""
    assert isinstance(w, Workload)
    units = [u.unit_id for u in w.units]
    rids = [r.request_id for r in w.rounds()]
    assert len(set(units)) == len(units) and len(set(rids)) == len(rids)
    for u in w.units:
        assert 0 <= u.arrival_ms <= bounds.MAX_ARRIVAL_MS
        for r in u.rounds:
            assert r.prefix_len >= 0 and r.input_len >= 0 and r.output_len >= 1
            assert r.prefix_len + r.input_len + r.output_len <= bounds.MAX_ROUND_TOKENS
            assert 0 <= r.tool_wait_after_ms <= bounds.MAX_WAIT_MS


def load_or_error(data: bytes, suffix: str, fmt: str) -> None:
    """A load is a workload inside the bounds, or one TraceFormatError with path and line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t{suffix}"
        path.write_bytes(data)
        for kwargs in ({"fmt": fmt}, {}):
            try:
                w = load_trace(path, **kwargs)
            except TraceFormatError as exc:
                assert exc.path == str(path) and exc.line >= 0 and exc.rule
            else:
                assert_within_bounds(w)
                trace_stats(w)  # and the statistics of what loads never overflow,
                build_plan(RunConfig.from_dict({"trace": str(path)}), w)  # nor its plan


def test_every_valid_sample_loads_inside_the_bounds():
    for fmt, (suffix, data) in VALID.items():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"t{suffix}"
            path.write_bytes(data)
            w = load_trace(path)
            assert w.fmt == fmt
            assert_within_bounds(w)


# ---------------------------------------------------------------- property: corruption

NUMBER = re.compile(rb"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?![\w])")
ABSURD = st.one_of(
    st.integers(bounds.MAX_ROUND_TOKENS - 2, bounds.MAX_ROUND_TOKENS + 2).map(str),
    st.integers(10**7, 10**40).map(str),
    st.sampled_from(["1e30", "-1e30", "1e308", "1e309", "2000000000", "2e9", "-0", "0.5",
                     "31622400001", "604800001", "9007199254740993", "1_28", "\uff11\uff12",
                     "\u0661\u0662", "1e-400", "0x10", "+7", " 9", "nan", "NaN", "Infinity",
                     '"12"', "true", "null", "[]"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
).map(lambda s: s.encode())


@st.composite
def absurd_number(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one of its numbers (drawn) replaced by an absurd literal (drawn)."""
    spots = list(NUMBER.finditer(data))
    m = spots[draw(st.integers(0, len(spots) - 1))]
    return data[: m.start()] + draw(ABSURD) + data[m.end() :]


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_absurd_numbers_raise_trace_format_error_or_stay_inside_the_bounds(fmt, data):
    suffix, valid = VALID[fmt]
    load_or_error(data.draw(absurd_number(valid)), suffix, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_corrupted_files_raise_only_trace_format_error_and_load_inside_the_bounds(fmt, ops, data):
    suffix, valid = VALID[fmt]
    blob = corrupt(valid, ops)
    if data.draw(st.booleans()) and NUMBER.search(blob):
        blob = data.draw(absurd_number(blob))
    load_or_error(blob, suffix, fmt)


# ---------------------------------------------------------------- each bound, each format


def _load(tmp_path: Path, name: str, text: str, **kw: object) -> Workload:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return load_trace(p, **kw)


def _jsonl(*objs: str) -> str:
    return "\n".join(objs) + "\n"


SESSION_H = "session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,arrival_time"
MOON = '{"timestamp":%s,"input_length":%s,"output_length":%s,"hash_ids":[1]%s}'
TRAJ = ('{"schema_version":1,"trajectory_id":"a","requests":[{"prompt_tokens":%s,'
        '"output_tokens":%s,"delay_after_ms":%s},{"prompt_tokens":%s,"output_tokens":1}]}')
ABENCH = ('{"session_id":"s","turns":[{"index":0,"input_tokens":%s,"output_tokens":%s,'
          '"cached_tokens":0,"pre_gap_ms":0},{"index":1,"input_tokens":%s,"output_tokens":1,'
          '"cached_tokens":0,"pre_gap_ms":%s}]}')
DYN = ('{"schema":"dynamo.request.trace.v1","event_type":"request_end","agent_context":'
       '{"session_id":"s"},"request":{"request_id":"%s","output_tokens":%s,'
       '"request_received_ms":%s,"replay":{"trace_block_size":%s,"input_length":%s,'
       '"input_sequence_hashes":[1]}}}')
TL = ('{"provider":"p","session_id":"%s","round_index":%s,"prefix_tokens":0,'
      '"newly_append_tokens":%s,"output_tokens":%s,"timing_events":[{"timestamp":"%s"}],'
      '"tools":[{"tool_wall_latency_ms":%s}]}')
T0 = "2026-01-01T00:00:00Z"

CASES = [
    # (format, file name, text, line, words)
    ("session", "a.csv", f"{SESSION_H}\ns,0,0,{BIG},1,0,0\n", 2, "input_len"),
    ("session", "a.csv", f"{SESSION_H}\ns,0,0,9000000,1000001,0,0\n", 2, "prompt 9,000,000"),
    ("session", "a.csv", f"{SESSION_H}\ns,0,0,5,1,1e30,0\n", 2, "tool_wait_after_ms"),
    ("session", "a.csv", f"{SESSION_H}\ns,0,0,5,1,0,1e30\n", 2, "arrival_time"),
    ("session", "a.csv", f"{SESSION_H}\ns,0,1e30,5,1,0,0\n", 2, "prefix_len"),
    ("session-execution-v2", "c.csv",
     f"{H}\nsession_s_round_000000,s,0,0.000000,0,{BIG},1,0.000000\n", 2, "input_len"),
    ("session-execution-v2", "c.csv",
     f"{H}\nsession_s_round_000000,s,0,0.000000,0,5,1,999999999999.000000\n", 2,
     "tool_wait_after_ms"),
    ("session-execution-v2", "c.csv",
     f"{H}\nsession_s_round_000000,s,0,0.000000,0,5,1,0.000000\n"
     "session_t_round_000000,t,0,99999999999.000000,0,5,1,0.000000\n", 3, "arrival_time_ms"),
    ("independent", "i.csv", f"id,arrival_time,input_len,output_len\na,0,{BIG},1\n", 2,
     "input_len"),
    ("independent", "i.csv", "id,arrival_time,input_len,output_len\na,0,5,20000000\n", 2,
     "output_len"),
    ("independent", "i.csv", "id,arrival_time,input_len,output_len\na,1e30,5,1\n", 2,
     "arrival_time"),
    ("mooncake", "m.jsonl", _jsonl(MOON % (0, 5, 1, ""), MOON % (0, BIG, 1, "")), 2,
     "input_length"),
    ("mooncake", "m.jsonl", _jsonl(MOON % (0, 5, 1, ""), MOON % (0, "1e30", 1, "")), 2,
     "input_length"),
    ("mooncake", "m.jsonl", _jsonl(MOON % ("1e30", 5, 1, "")), 1, "timestamp"),
    ("mooncake", "m.jsonl", _jsonl(MOON % (0, 5, 1, ',"session_id":"s","delay":1e30')), 1,
     "delay"),
    ("trajectory", "t.jsonl", _jsonl(TRAJ % (BIG, 1, 0, BIG + 2)), 1, "prompt_tokens"),
    ("trajectory", "t.jsonl", _jsonl(TRAJ % (5, 1, "1e30", 9)), 1, "delay_after_ms"),
    ("abench", "a.jsonl", _jsonl(ABENCH % (5, BIG, 9, 0)), 1, "output_tokens"),
    ("abench", "a.jsonl", _jsonl(ABENCH % (5, 1, 9, "1e30")), 1, "pre_gap_ms"),
    ("dynamo", "d.jsonl", _jsonl(DYN % ("r", 1, 1000, 4, BIG)), 1, "input_length"),
    ("dynamo", "d.jsonl", _jsonl(DYN % ("r", 1, "1e30", 4, 3)), 1, "request_received_ms"),
    ("dynamo", "d.jsonl", _jsonl(DYN % ("r", 1, 1000, 4, 3),
                                 DYN.replace('"s"', '"t"') % ("q", 1, 1e13, 4, 3)), 2,
     "request_received_ms after the first request"),
    ("dynamo", "d.jsonl", _jsonl(DYN.replace('"output', '"total_time_ms":10,"output')
                                 % ("r", 1, 1000, 4, 3), DYN % ("q", 1, 1000 + 8e8, 4, 3)),
     1, "wait after request 'r'"),
    ("tracelab", "l.jsonl", _jsonl(TL % ("s", 0, BIG, 1, T0, 0)), 1, "newly_append_tokens"),
    ("tracelab", "l.jsonl", _jsonl(TL % ("s", 0, 5, 1, T0, "1e30")), 1, "tool_wall_latency_ms"),
    ("tracelab", "l.jsonl", _jsonl(TL % ("s", 0, 5, 1, T0, 0),
                                   TL % ("t", 0, 5, 1, "2028-01-01T00:00:00Z", 0)), 2,
     "session arrival"),
]


@pytest.mark.parametrize(("fmt", "name", "text", "line", "words"), CASES,
                         ids=[f"{c[0]}-{c[4]}-{i}" for i, c in enumerate(CASES)])
def test_a_value_past_its_bound_names_path_line_and_bound(tmp_path, fmt, name, text, line, words):
    for kw in ({"fmt": fmt}, {}):
        with pytest.raises(TraceFormatError) as exc:
            _load(tmp_path, name, text, **kw)
        assert exc.value.line == line, exc.value
        assert words in exc.value.rule and "exceeds the bound" in exc.value.rule, exc.value
        assert bounds.DOC in exc.value.rule


def test_the_bound_itself_is_accepted(tmp_path):
    m = bounds.MAX_ROUND_TOKENS
    w = _load(tmp_path, "i.csv", f"id,arrival_time,input_len,output_len\n"
              f"a,{bounds.MAX_ARRIVAL_MS:.0f},{m - 1},1\n")
    assert w.units[0].rounds[0].input_len == m - 1
    with pytest.raises(TraceFormatError, match="exceeds the bound"):
        _load(tmp_path, "i.csv", f"id,arrival_time,input_len,output_len\na,0,{m},1\n")


def test_canonical_fast_path_refuses_what_the_strict_path_refuses(tmp_path, monkeypatch):
    rows = "".join(f"session_{k}_round_000000,{k},0,0.000000,0,5,1,0.000000\n" for k in range(50))
    bad = rows + f"session_x_round_000000,x,0,0.000000,0,{BIG},1,0.000000\n"
    for fast in (0, 10**9):
        monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", fast)
        with pytest.raises(TraceFormatError, match=r"input_len .* exceeds the bound") as exc:
            _load(tmp_path, "c.csv", f"{H}\n{bad}")
        assert exc.value.line == 52
        assert len(_load(tmp_path, "c.csv", f"{H}\n{rows}").units) == 50


# ---------------------------------------------------------------- lenient parsing


@pytest.mark.parametrize("spelling", ["1_28", "\uff11\uff12\uff18", "\u0661\u0662", "12\u00a0",
                                      "0x10", "1e2_0"])
def test_numbers_are_ascii_only_in_every_csv_format(tmp_path, spelling):
    texts = {
        "independent": f"id,arrival_time,input_len,output_len\na,0,{spelling},1\n",
        "session": f"{SESSION_H}\ns,0,0,{spelling},1,0,0\n",
        "session-execution-v2": f"{H}\nsession_s_round_000000,s,0,0.000000,0,{spelling},1,"
                                "0.000000\n",
    }
    for fmt, text in texts.items():
        with pytest.raises(TraceFormatError, match="input_len must be an integer") as exc:
            _load(tmp_path, "x.csv", text, fmt=fmt)
        assert exc.value.line == 2


def test_number_strings_are_ascii_only_in_dynamo(tmp_path):
    for spelling in ("1_28", "\uff11\uff12"):
        text = _jsonl(DYN % ("r", f'"{spelling}"', 1000, 4, 3))
        with pytest.raises(TraceFormatError, match="output_tokens must be an integer"):
            _load(tmp_path, "d.jsonl", text)
    ok = _load(tmp_path, "d.jsonl", _jsonl(DYN % ("r", '"12"', '"1000.0"', 4, 3)))
    assert ok.units[0].rounds[0].output_len == 12


def test_time_strings_are_ascii_only(tmp_path):
    with pytest.raises(TraceFormatError, match="arrival_time must be a number"):
        _load(tmp_path, "i.csv", "id,arrival_time,input_len,output_len\na,1_0,5,1\n")
    with pytest.raises(TraceFormatError, match="arrival_time must be finite"):
        _load(tmp_path, "i.csv", "id,arrival_time,input_len,output_len\na,inf,5,1\n")
    w = _load(tmp_path, "i.csv", "id,arrival_time,input_len,output_len\na,1.5e2,5,1\n")
    assert w.units[0].arrival_ms == 150.0


def test_tracelab_renamed_sessions_never_collide_with_a_recorded_one(tmp_path):
    text = _jsonl(
        TL % ("s", 0, 5, 1, T0, 0),
        TL.replace('"p"', '"q"') % ("s", 0, 6, 1, T0, 0),  # same session_id, another provider
        TL % ("s~2", 0, 7, 1, T0, 0),  # a session really called s~2
    )
    w = _load(tmp_path, "l.jsonl", text)
    assert [u.unit_id for u in w.units] == ["s", "s~3", "s~2"]
    assert [u.rounds[0].input_len for u in w.units] == [5, 6, 7]
    assert w.units[1].meta["source_session_id"] == "s"
    assert_within_bounds(w)


def test_mooncake_generated_ids_step_aside_for_ids_the_file_uses(tmp_path):
    text = _jsonl(
        MOON % (0, 5, 1, ""),  # row 0: generated id mooncake_0 ...
        MOON % (0, 5, 1, ',"session_id":"mooncake_0"'),  # ... is also a session's id
        MOON % (0, 5, 1, ',"request_id":"mooncake_2~2"'),
        MOON % (0, 5, 1, ',"request_id":"mooncake_2"'),
    )
    w = _load(tmp_path, "m.jsonl", text)
    assert [(u.unit_id, u.kind) for u in w.units] == [
        ("mooncake_0~2", "independent"), ("mooncake_0", "session"),
        ("mooncake_2~2", "independent"), ("mooncake_2", "independent")]
    assert w.units[1].rounds[0].request_id == "mooncake_1"
    assert_within_bounds(w)


def test_mooncake_given_ids_must_be_unique_and_not_a_session_id(tmp_path):
    dup = _jsonl(MOON % (0, 5, 1, ',"request_id":"r"'), MOON % (0, 5, 1, ',"request_id":"r"'))
    with pytest.raises(TraceFormatError, match=r"duplicate request_id 'r' .also at line 1") as exc:
        _load(tmp_path, "m.jsonl", dup)
    assert exc.value.line == 2
    clash = _jsonl(MOON % (0, 5, 1, ',"session_id":"x"'), MOON % (0, 5, 1, ',"request_id":"x"'))
    with pytest.raises(TraceFormatError, match="is also a session_id") as exc:
        _load(tmp_path, "m.jsonl", clash)
    assert exc.value.line == 2


@pytest.mark.parametrize("fast", [0, 10**9])
def test_v2_prefix_longer_than_the_conversation_is_refused(tmp_path, monkeypatch, fast):
    monkeypatch.setattr(canonical, "FAST_PATH_MIN_ROWS", fast)
    ok = (f"{H}\nsession_s_round_000000,s,0,0.000000,0,100,28,0.000000\n"
          "session_s_round_000001,s,1,0.000000,128,5,1,0.000000\n")
    assert _load(tmp_path, "c.csv", ok).units[0].rounds[1].prefix_len == 128
    bad = ok.replace(",1,0.000000,128,5,", ",1,0.000000,1000128,5,")
    with pytest.raises(TraceFormatError, match=r"prefix_len 1000128 is longer than the "
                       r"conversation so far \(128 ") as exc:
        _load(tmp_path, "c.csv", bad)
    assert exc.value.line == 3


def test_tracegen_output_always_obeys_the_prefix_rule(tmp_path):
    for policy in ("trace-reported", "prefix-preserving"):
        res = tracegen(BUNDLED / "request-factory" / "session_rounds_v2_example.csv",
                       tmp_path / f"{policy}.csv", policy=policy)
        assert res.workload.n_rounds == 211


# ---------------------------------------------------------------- through the CLI


def test_cli_refuses_absurd_values_in_one_line_before_any_request(tmp_path):
    import os
    import subprocess
    import sys

    trace = tmp_path / "t.csv"
    trace.write_text(f"{SESSION_H}\ns,0,0,{BIG},1,0,0\n")
    wait = tmp_path / "w.jsonl"
    wait.write_text(_jsonl(TRAJ % (5, 1, "1e30", 9)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = tmp_path / "runs"
    for args in (("stats", str(trace)), ("stats", str(wait), "--json"),
                 ("replay", "--trace", str(trace), "--target", "sim", "-o", str(runs)),
                 ("replay", "--trace", str(wait), "--target", "sim", "-o", str(runs)),
                 ("tracegen", str(trace), "-o", str(tmp_path / "o.csv")),
                 ("stats", str(trace), "--block-size", "0")):
        proc = subprocess.run([sys.executable, "-m", "workbench", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        code = 2 if "--block-size" in args else 3  # ExitCode: CONFIG_ERROR, TRACE_ERROR
        assert proc.returncode == code and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert "exceeds the bound" in last or "--block-size: must be" in last, proc.stderr
    assert not runs.exists() and not (tmp_path / "o.csv").exists()


def test_the_last_check_names_unit_and_round_of_what_a_reader_derived():
    from workbench.records import Round, Unit

    def wl(*units: Unit) -> Workload:
        return Workload(tuple(units), "x")

    ok = Unit("u", "session", 0.0, (Round("r0", "u", 0, 0.0, 0, 5, 1, 10.0),))
    bounds.check_workload("p", wl(ok))
    cases = {
        "tool wait": Unit("u", "session", 0.0, (Round("r0", "u", 0, 0.0, 0, 5, 1, 1e30),)),
        "arrival": Unit("u", "session", float("nan"), ok.rounds),
        "prompt 10,000,000 + output 1": Unit(
            "u", "session", 0.0, (Round("r0", "u", 0, 0.0, 9_999_999, 1, 1),)),
    }
    for words, unit in cases.items():
        with pytest.raises(TraceFormatError, match=re.escape(words)) as exc:
            bounds.check_workload("p", wl(unit))
        assert exc.value.line == 0 and "unit 'u'" in exc.value.rule
    with pytest.raises(TraceFormatError, match="two units share the id 'u'"):
        bounds.check_workload("p", wl(ok, ok))
    twin = Unit("v", "session", 0.0, ok.rounds)
    with pytest.raises(TraceFormatError, match="two rounds share the request id 'r0'"):
        bounds.check_workload("p", wl(ok, twin))


@pytest.mark.parametrize(("source", "words"), [
    ("synthetic:sessions=100000000000", "want an integer in 1..1,000,000"),
    ("synthetic:sessions=2,rounds=fixed:1000000000", "past the bound of 100,000"),
    ("synthetic:sessions=2,input=fixed:1e30", "past the bound of 10,000,000"),
    ("synthetic:sessions=2,tool_wait=fixed:1e30", "past the bound of 604,800,000"),
    ("synthetic:sessions=2,input=lognormal:2000,9", "sigma is at most 4"),
    ("synthetic:sessions=200,rounds=fixed:100000", "draws 20,000,000 rounds"),
    ("synthetic:sessions=1,rounds=fixed:300,input=fixed:50000",
     "unit '0' round 199: prompt 10,039,800 + output 200"),
])
def test_synthetic_sources_stay_inside_the_bounds(tmp_path, source, words):
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(words)):
        tracegen(source, tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()
