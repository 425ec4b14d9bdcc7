"""The project's adversarial tests, extended to the surfaces added since round two
(issue 43, item 7): session graphs (a graph CSV and its tracegen sidecar), captured
(weka) traces, the capture proxy's request and response reading, saved plans and engine
files, and server sweeps (``--serve`` commands, a torn ``sweep.json``). Each input is
corrupted by the shared strategy (``tests/corruption.py``: byte flips, truncation,
deleted and duplicated lines) or drawn as arbitrary text; the outcome is the surface's
own result or its one documented error (``TraceFormatError`` with a line and a rule,
``ConfigError``), never anything else. No ``parity`` command exists on main yet.

Found by these: a torn or edited ``sweep.json`` was a JSONDecodeError or AttributeError
traceback on resume (now ``ConfigError`` naming the file).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from corruption import OPS, corrupt, loads_or_format_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.capture.protocols import CHAT, COMPLETIONS, request_facts, response_facts
from workbench.config.engine_file import read_engine_file
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.plan import PlanResult, load_plan
from workbench.sweeps.serve import ServeSpec
from workbench.sweeps.store import load_sweep

WEKA = Path(data_path("weka/cc_traces_sample.jsonl")).read_bytes()
GRAPH_HEADER = ("session_id,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms,"
                "parent_session_id,spawn_round,spawn_trigger,spawn_delay_ms,join_round\n")
GRAPH_ROWS = """p,0,0,64,8,2,,,,,
p,1,72,32,8,1,,,,,
p,2,112,16,4,0,,,,,
c1,0,0,48,6,1,p,0,,,
c1,1,54,24,6,0,p,0,,,
c2,0,0,40,4,0,p,1,,,2
"""
CHAT_BODY = json.dumps({"model": "m", "stream": True, "messages": [
    {"role": "system", "content": "s"}, {"role": "user", "content": "hello there"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "type": "function",
                                                         "function": {"name": "f",
                                                                      "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "t", "content": "42"}]}).encode()
STREAM = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
          b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n'
          b"data: [DONE]\n\n")
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(ops=OPS)
def test_a_corrupted_session_graph_loads_or_is_one_trace_error(ops):
    loads_or_format_error(corrupt((GRAPH_HEADER + GRAPH_ROWS).encode(), ops), ".csv", "auto")


@SETTINGS
@given(ops=OPS)
def test_a_corrupted_graph_sidecar_loads_or_is_one_trace_error(ops):
    """tracegen's ``<stem>.graph.json`` beside its canonical CSV, corrupted."""
    from workbench.errors import TraceFormatError
    from workbench.traces.canonical import graph_sidecar_path
    from workbench.traces.load import load_trace
    from workbench.workloads.materialize import tracegen

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "g.csv"
        src.write_text(GRAPH_HEADER + GRAPH_ROWS)
        out = tracegen(src, Path(tmp) / "out.csv").csv_path
        side = graph_sidecar_path(out)
        side.write_bytes(corrupt(side.read_bytes(), ops))
        try:
            load_trace(out)
        except TraceFormatError as exc:
            assert exc.line >= 0 and exc.rule


@SETTINGS
@given(ops=OPS)
def test_a_corrupted_weka_trace_loads_or_is_one_trace_error(ops):
    loads_or_format_error(corrupt(WEKA, ops), ".jsonl", "weka", "auto")


@SETTINGS
@given(ops=OPS, stream=st.booleans())
def test_the_capture_proxy_reads_any_request_and_answer(ops, stream):
    """What an agent sends and an upstream answers, corrupted: facts or None, never an
    exception (the proxy would drop the exchange)."""
    for path, body in (("/v1/chat/completions", CHAT_BODY),
                       ("/v1/completions", b'{"model":"m","prompt":"a b c","stream":true}')):
        request_facts(path, corrupt(body, ops))
    for api in (CHAT, COMPLETIONS):
        response_facts(api, stream, corrupt(STREAM, ops))


@SETTINGS
@given(ops=OPS)
def test_a_corrupted_plan_or_engine_file_is_one_config_error(ops):
    plan = PlanResult("t", "ttft_ms:p90<=1", 1.0, [1.0], [], {})
    with tempfile.TemporaryDirectory() as tmp:
        saved = plan.save(tmp, "p")
        f = saved / "plan.json"
        f.write_bytes(corrupt(f.read_bytes(), ops))
        with contextlib.suppress(ConfigError):
            load_plan(saved)
        engine = Path(tmp) / "engine.json"
        engine.write_bytes(corrupt(b'{"engine": {"block_size": 16, "num_blocks": 4096}}', ops))
        with contextlib.suppress(ConfigError):
            read_engine_file(engine, check=True)


@SETTINGS
@given(command=st.text(max_size=60), values=st.lists(st.text(max_size=8), min_size=1,
                                                      max_size=3))
def test_any_serve_command_is_checked_or_refused(command, values):
    """A ``--serve`` command of any text, with a ``{p}`` placeholder fed any values: a
    checked spec whose every point splits into words, or one ConfigError."""
    for cmd, over in ((command, {}), (f"{command} {{p}}", {"p": values})):
        try:
            spec = ServeSpec(cmd, over).check()
        except ConfigError:
            continue
        for point in spec.points():
            assert spec.argv(point)


@SETTINGS
@given(ops=OPS)
def test_a_torn_sweep_manifest_is_one_config_error(ops):
    doc = json.dumps({"sweep_id": "w", "kind": "grid", "status": "running",
                      "points": [{"index": 0, "status": "pending", "params": {}}]}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sweep.json").write_bytes(corrupt(doc, ops))
        with contextlib.suppress(ConfigError):
            load_sweep(tmp)
