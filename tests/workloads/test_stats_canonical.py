"""QA: ``stats`` never re-plans a canonical (session-execution-v2) file either.

Found by the independent check: ``replay``/``simulate`` refuse a context policy
with a canonical file (issue 12 item 4), but ``workbench stats --policy
prefix-preserving canonical.csv`` re-planned it and printed a planned hit rate of
0.937 for a file planned at 0.874, with exit 0.
"""

import json
import subprocess
import sys

import pytest

from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.traces.load import load_trace
from workbench.workloads.materialize import tracegen
from workbench.workloads.trace_stats import trace_stats


@pytest.fixture
def canonical(tmp_path):
    out = tmp_path / "canonical.csv"
    tracegen(data_path("tracelab/session_workload_example.csv"), out, policy="trace-reported")
    return out


def _stats(*args):
    return subprocess.run([sys.executable, "-m", "workbench", "stats", *args],
                          capture_output=True, text=True, timeout=120)


def test_stats_refuses_a_policy_with_a_canonical_file(canonical):
    for policy in ("prefix-preserving", "trace-reported"):
        out = _stats(str(canonical), "--policy", policy)
        assert out.returncode == 2, out.stdout
        assert "Traceback" not in out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot apply to" in lines[0] and str(canonical) in lines[0]


def test_stats_of_a_canonical_file_are_the_file_as_written(canonical):
    out = _stats(str(canonical), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    manifest = json.loads(canonical.with_suffix(".manifest.json").read_text())
    w = load_trace(canonical)
    prefix = sum(r.prefix_len for u in w.units for r in u.rounds)
    prompt = sum(r.prefix_len + r.input_len for u in w.units for r in u.rounds)
    assert doc["planned_prefix_hit_rate"] == pytest.approx(prefix / prompt)
    assert doc["total_prefix_tokens"] == prefix
    assert manifest  # the sidecar exists: the file really is tracegen's output


def test_trace_stats_api_refuses_replanning_a_canonical_workload(canonical):
    w = load_trace(canonical)
    with pytest.raises(ConfigError, match="cannot apply to"):
        trace_stats(w, policy="prefix-preserving")
    as_written = trace_stats(w)
    assert as_written["total_prefix_tokens"] == sum(r.prefix_len for u in w.units for r in u.rounds)


def test_tracegen_refuses_to_replan_a_canonical_file(canonical, tmp_path):
    """``tracegen --policy prefix-preserving canonical.csv`` re-planned an already planned
    file (planned hit 0.874 -> 0.937) and wrote it as if planned from the raw source."""
    with pytest.raises(ConfigError, match="cannot apply to"):
        tracegen(canonical, tmp_path / "again.csv", policy="prefix-preserving")
    assert not (tmp_path / "again.csv").exists()
    out = subprocess.run([sys.executable, "-m", "workbench", "tracegen", str(canonical), "-o",
                          str(tmp_path / "again.csv"), "--policy", "monotonic"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot apply to" in out.stderr
    # the identity (trace-reported, the default) still copies it as written
    copy = tracegen(canonical, tmp_path / "copy.csv")
    assert [r.prefix_len for u in copy.workload.units for r in u.rounds] == [
        r.prefix_len for u in load_trace(canonical).units for r in u.rounds]
