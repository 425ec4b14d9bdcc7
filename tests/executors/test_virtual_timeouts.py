"""``arrival.request_timeout_s`` and ``arrival.stream_idle_timeout_s`` in virtual time
(docs/arrival.md, "Timeouts in virtual time"): a bound the run sets (other than its
default) cuts a request at that virtual time, at the engine, and records it as a live
client's timeout does; the defaults are not applied, so a run without bounds is as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.twin import in_child
from workbench.data import path as data_path
from workbench.errors import ExitCode
from workbench.executors.virtual import simulate
from workbench.report.canonical import run_digest

# independent requests far apart (each alone on the engine, no prefix shared): a cut one
# cannot change another's timing, so "cut" is exactly "would have taken longer"
SHAPES = [(500, 20), (8000, 40), (2000, 200), (16000, 10), (1000, 5), (30000, 60)]
ENGINE = {"enable_prefix_caching": False}


def _trace(folder: Path) -> str:
    path = folder / "apart.csv"
    path.write_text("id,arrival_time,input_len,output_len\n" + "".join(
        f"u{i},{i * 100_000},{n_in},{n_out}\n" for i, (n_in, n_out) in enumerate(SHAPES)))
    return str(path)


def _run(trace: str, **arrival: Any) -> dict[str, Any]:
    result = simulate({"trace": trace, "target": {"engine": ENGINE}, "arrival": arrival})
    return {r.request_id: r for r in result.records}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _trace(tmp_path_factory.mktemp("vt"))


@pytest.fixture(scope="module")
def free(trace: str) -> dict[str, Any]:
    recs = _run(trace)
    assert all(r.status == "ok" for r in recs.values())
    return recs


def test_the_request_timeout_cuts_exactly_the_requests_that_take_longer(trace, free):
    bound = 0.5
    e2e = {k: (r.end_ns - r.dispatch_ns) / 1e9 for k, r in free.items()}
    late = {k for k, s in e2e.items() if s > bound}
    assert late and late != set(e2e)  # the bound splits the run
    cut = _run(trace, request_timeout_s=bound)
    assert {k for k, r in cut.items() if r.status != "ok"} == late
    for k, r in cut.items():
        if k in late:  # cut at the bound, in virtual time, with the tokens so far
            n = len(r.token_times_ns)
            assert r.error == f"request timed out after {bound}s after {n} token events"
            assert abs(r.end_ns - r.dispatch_ns - bound * 1e9) <= 1_000
            assert len(r.token_times_ns) < len(free[k].token_times_ns)
            assert r.token_times_ns == free[k].token_times_ns[: len(r.token_times_ns)]
        else:  # the run went on: the others as without the bound
            assert (r.status, r.end_ns - r.dispatch_ns, r.token_times_ns) == (
                "ok", free[k].end_ns - free[k].dispatch_ns, free[k].token_times_ns)


def test_the_stream_idle_timeout_cuts_a_first_token_later_than_it(trace, free):
    idle = 0.2
    ttft = {k: (r.first_token_ns - r.dispatch_ns) / 1e9 for k, r in free.items()}
    gaps = {k: max(b - a for a, b in zip(r.token_times_ns, r.token_times_ns[1:], strict=False))
            for k, r in free.items()}
    assert max(gaps.values()) / 1e9 < idle  # only a first token can be that late here
    slow = {k for k, s in ttft.items() if s > idle}
    assert slow and slow != set(ttft)
    cut = _run(trace, stream_idle_timeout_s=idle)
    assert {k for k, r in cut.items() if r.status != "ok"} == slow
    for k in slow:
        r = cut[k]
        assert r.error == f"stream idle for more than {idle}s after 0 token events"
        assert r.token_times_ns == [] and abs(r.end_ns - r.dispatch_ns - idle * 1e9) <= 1_000


def test_the_defaults_are_not_applied_in_virtual_time(trace):
    """A run at the default bounds, given or not, is the run without them, byte for byte."""
    base = simulate({"trace": trace, "target": {"engine": ENGINE}})
    given = simulate({"trace": trace, "target": {"engine": ENGINE},
                      "arrival": {"request_timeout_s": 600.0, "stream_idle_timeout_s": 60.0}})
    assert run_digest(given) == run_digest(base)
    assert "timeouts_applied" not in (base.manifest.virtual_executor or {})


def test_a_bound_is_said_in_the_manifest(trace):
    result = simulate({"trace": trace, "target": {"engine": ENGINE},
                       "arrival": {"request_timeout_s": 0.5}})
    assert result.manifest.virtual_executor["timeouts_applied"] == {
        "request_timeout_s": 0.5, "stream_idle_timeout_s": None}


def cut_view(folder: str) -> list[Any]:
    """The cut run's records as plain values (for the compiled/Python comparison)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    recs = _run(_trace(Path(folder)), request_timeout_s=0.5, stream_idle_timeout_s=0.3)
    return [[k, r.status, r.error, r.end_ns - r.dispatch_ns, r.token_times_ns]
            for k, r in sorted(recs.items())]


def test_compiled_and_python_twins_cut_the_same(tmp_path):
    here = in_child(__file__, f"cut_view({str(tmp_path / 'c')!r})", compiled=True)
    there = in_child(__file__, f"cut_view({str(tmp_path / 'p')!r})", compiled=False)
    assert here == there
    assert any(status != "ok" for _, status, *_ in here)


def test_the_flag_bounds_a_simulate_run():
    """The case a user hit: ``--request-timeout 0.01`` on five Mooncake requests (TTFT about
    half a second each) printed "5/5 ok"; each is now a timeout error (exit 4)."""
    trace = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "--trace", trace, "--max-items", "5",
         "--request-timeout", "0.01", "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == ExitCode.ERROR_RATE, done.stderr
    brief = json.loads(done.stdout)
    assert (brief["requests"], brief["ok"], brief["errors"]) == (5, 0, 5), brief
