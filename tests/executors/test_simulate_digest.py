"""Portable canonical digests: the same trace content and engine config give the same digest
whatever the output folder, the trace's path, the host, the time and the process.

The canonical report leaves out exactly ``CANONICAL_EXCLUDED`` (wall clock, the host,
paths); every other field is in, so changing any measured number changes the digest.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.report.canonical import CANONICAL_EXCLUDED, canonical_report, report_digest

TRACE = data_path("tracelab/multi_session_example.csv")
ENGINE = ["--engine", "num_blocks=512"]


def cli_digest(trace: Path, out: Path, cwd: Path, hash_seed: str) -> str:
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", str(trace), *ENGINE,
           "--policy", "prefix-preserving", "-o", str(out), "--digest"]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return next(ln for ln in done.stdout.splitlines() if ln.startswith("digest:"))


def test_digest_equal_across_output_folders_a_copied_trace_and_two_processes(
    tmp_path: Path,
) -> None:
    copied = tmp_path / "elsewhere" / "renamed-trace.csv"
    copied.parent.mkdir()
    shutil.copy(TRACE, copied)
    a = cli_digest(Path(TRACE), tmp_path / "a", tmp_path, "1")
    b = cli_digest(copied, tmp_path / "b" / "deeper", copied.parent, "2")
    assert a == b
    # and in this process, with no output folder at all, under another run id
    cfg = {"trace": str(copied), "context": "prefix-preserving", "run_id": "another-name",
           "target": {"url": "sim", "engine": {"num_blocks": 512}}}  # fmt: skip
    assert "digest: " + report_digest(canonical_report(simulate(cfg))) == a


def _changed(report: dict, edit) -> str:
    doc = copy.deepcopy(report)
    edit(doc)
    return report_digest(doc)


def test_every_measured_field_is_in_and_only_the_list_is_out() -> None:
    result = simulate({"trace": str(TRACE), "context": "prefix-preserving"})
    report = canonical_report(result)
    digest = report_digest(report)
    rec = report["records"][1]
    assert {"cached_tokens", "token_times_ns", "first_token_ns", "prompt_tokens"} <= set(rec)
    assert "run_id" not in rec and "run_id" not in report["manifest"]
    assert "path" not in report["manifest"]["trace"] and "sha256" in report["manifest"]["trace"]
    assert "vllm:num_preemptions_total" in report["metrics_timeline"][-1]
    for edit in (
        lambda d: d["records"][1].update(cached_tokens=d["records"][1]["cached_tokens"] + 16),
        lambda d: d["records"][1]["token_times_ns"].__setitem__(0, 1),
        lambda d: d["metrics_timeline"][-1].update({"vllm:num_preemptions_total": 99}),
        lambda d: d["manifest"]["engine"].update(num_blocks=1),
        lambda d: d["manifest"]["trace"].update(sha256="0" * 64),
    ):
        assert _changed(report, edit) != digest
    # the list is closed: each entry names its reason, and only those paths are dropped
    assert all(CANONICAL_EXCLUDED.values())
    full = {"manifest": result.manifest, "records": [r.to_dict() for r in result.records]}
    assert "run_id" in full["manifest"] and "run_id" in full["records"][0]
