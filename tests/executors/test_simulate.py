"""Virtual-time replay: exact timings, determinism across processes."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.report.canonical import canonical_report, report_digest
from workbench.sim.config import EngineConfig
from workbench.sim.cost import prefill_ms


def test_lone_request_ttft_equals_prefill_time(tmp_path):
    trace = tmp_path / "one.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n1,0,4000,8\n")
    result = simulate({"trace": str(trace)})
    (rec,) = result.records
    assert rec.status == "ok"
    assert rec.first_token_ns - rec.dispatch_ns == round(prefill_ms(EngineConfig(), 4000) * 1e6)
    assert rec.completion_tokens == 8 and sum(rec.token_counts) == 8


def test_sessions_hit_the_cache_in_virtual_time():
    cfg = {"trace": str(data_path("tracelab/multi_session_large.csv"))}
    result = simulate(cfg)
    later = [r for r in result.records if r.round_idx > 0]
    assert all(r.status == "ok" for r in result.records)
    block = EngineConfig().block_size
    assert all(r.cached_tokens >= r.planned_prefix_tokens - block for r in later)
    assert result.manifest.virtual_duration_s > 0


def test_same_input_same_digest_in_two_processes():
    trace = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    cmd = [sys.executable, "-m", "workbench", "simulate", "--trace", trace,
           "--max-items", "80", "--digest"]
    digests = []
    for _ in range(2):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        digests.append(next(ln for ln in out.stdout.splitlines() if ln.startswith("digest:")))
    assert digests[0] == digests[1]
    again = simulate({"trace": {"path": trace, "max_items": 80}})
    assert "digest: " + report_digest(canonical_report(again)) == digests[0]


async def test_simulate_works_inside_a_running_loop():
    """A notebook cell runs inside the kernel's loop; simulate must still work there, with
    the run it makes outside one (the same canonical digest)."""
    import workbench as wb

    cfg = {"trace": str(data_path("tracelab/multi_session_example.csv"))}
    result = wb.simulate(cfg)
    assert result.records and all(r.status == "ok" for r in result.records)
    outside = await asyncio.to_thread(wb.simulate, cfg)  # no loop runs on that thread
    assert report_digest(canonical_report(result)) == report_digest(canonical_report(outside))


def test_simulate_collects_garbage_in_larger_batches_and_restores_the_threshold(
    tmp_path, monkeypatch
):
    """A virtual replay runs with a wide young generation (GC_GEN0_THRESHOLD) and puts
    the process's own thresholds back afterwards, also when the run fails."""
    import gc

    import pytest

    from workbench.executors import virtual
    from workbench.replay import loops

    seen: list[tuple[int, int, int]] = []
    real = loops.run_virtual

    def spy(coro):
        seen.append(gc.get_threshold())
        return real(coro)

    monkeypatch.setattr(loops, "run_virtual", spy)
    before = gc.get_threshold()
    trace = tmp_path / "one.csv"
    trace.write_text("id,arrival_time,input_len,output_len\n1,0,40,2\n")
    simulate({"trace": str(trace)})
    assert seen == [(virtual.GC_GEN0_THRESHOLD, *before[1:])]
    assert gc.get_threshold() == before

    def boom(coro):
        coro.close()
        raise RuntimeError("engine fault")

    monkeypatch.setattr(loops, "run_virtual", boom)
    with pytest.raises(RuntimeError, match="engine fault"):
        simulate({"trace": str(trace)})
    assert gc.get_threshold() == before



def test_a_saved_run_carries_the_summary_it_wrote(tmp_path, monkeypatch, capsys):
    """``simulate`` with an ``out_dir`` keeps the summary it wrote to summary.json on the
    result (the manifest's SLO), so the CLI prints it without summarizing again; a
    summary made with another SLO is not kept."""
    from workbench.cli import main
    from workbench.metrics import files, summarize

    trace = str(data_path("tracelab/multi_session_large.csv"))
    result = simulate({"trace": trace, "slo": {"ttft_ms": 500.0},
                       "out_dir": str(tmp_path / "a"), "executor": {"keep_records": False}})
    assert result.records_on_disk and result.summary is not None
    saved = json.loads((Path(result.run_dir) / "summary.json").read_text())
    assert saved["slo"] is not None and json.loads(json.dumps(result.summary)) == saved
    assert result.summary == summarize(result)
    files.finish(result, Path(result.run_dir), slo={"ttft_ms": 1.0})
    assert result.summary is None

    calls = []  # what the CLI's ``summary_of`` would summarize (the saved run's: nothing)
    monkeypatch.setattr("workbench.metrics.summary.summarize",
                        lambda *a, **k: calls.append(a) or summarize(*a, **k))  # fmt: skip
    args = ["simulate", "--trace", trace, "-o", str(tmp_path / "b"), "--json"]
    assert main(args) == 0 and calls == []
    # a run that was not saved is summarized there (the patch sees it)
    assert main(["simulate", "--trace", trace, "--json"]) == 0 and len(calls) == 1
    capsys.readouterr()
    args = ["simulate", "--trace", trace, "-o", str(tmp_path / "c"), "--json"]
    assert main(args) == 0 and len(calls) == 1
    printed, _ = json.JSONDecoder().raw_decode(capsys.readouterr().out)
    assert printed["requests"] == saved["requests"] and printed["ok"] == saved["ok"]


def test_a_virtual_run_never_imports_the_http_client(tmp_path: Path) -> None:
    """``simulate`` sends nothing over a socket: aiohttp (~0.2 s of imports) stays out of
    the process, and the manifest still records its version."""
    trace = str(data_path("mooncake/conversation_trace_head600.jsonl"))
    code = (
        "import sys\n"
        "from workbench.cli import main\n"
        "try:\n"
        f"    main(['simulate', '--trace', {trace!r}, '--max-items', '5',"
        f" '-o', {str(tmp_path)!r}])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('aiohttp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr
    import aiohttp

    (manifest,) = tmp_path.glob("*/manifest.json")
    assert json.loads(manifest.read_text())["versions"]["aiohttp"] == aiohttp.__version__
