"""Calibrate the embedded engine on a real vLLM, then predict a held-out trace.

Two calibration traces (independent requests one at a time, so every prefill runs
alone; and sixteen others eight at a time, so decode batches grow and requests
overlap) and a held-out trace (other prompt and output lengths, twenty requests at
concurrency 4) run against the real server after one warm-up run, alternating
A, A', B for ``ROUNDS`` rounds so that all see the same machine. The cost model
fitted from the A runs (``workbench.calibration.fit``) then replays the B config in
virtual time: p50 TTFT and p50 TPOT must be within 15 % of the p50 over all B runs'
records together (or within the B runs' own spread, when the identical runs disagree
by more than that), in one of two attempts. The server (conftest) and this client
run at niceness -10 where allowed, since on a small shared machine other load
otherwise delays the server's token delivery (docs/calibration.md, "On a shared
CPU"; bench/README.md#calibration has the errors seen). Each attempt prints, and a
miss reports, its p50s predicted vs measured for the held-out runs and for the
calibration runs replayed by their own fit, TTFT also split into requests that joined a
running batch and the first wave (``figures``): what tells machine noise (the runs'
spread) from a fit that misses its own runs or one admission class.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.scrape import parse_metrics
from workbench.calibration.fit import calibrate
from workbench.calibration.predict import predict_repeats, replay_config
from workbench.calibration.split import PARTS, SPLIT_STEPS, knobs_of_split
from workbench.executors.dispatch import run_async
from workbench.executors.virtual import simulate
from workbench.metrics.frame import ok_rows
from workbench.storage.rundir import load

from .conftest import VLLMServer

pytestmark = pytest.mark.real_engine

TOLERANCE_PCT = 15.0
ROUNDS = 6
ATTEMPTS = 2
CLIENT_NICE = -10
NEAR_TIE_PCT = 1.0  # splits of c this close in error on the calibration runs: near ties
NEAR_TIES = 40


def _csv(path: Path, rows: list[tuple[str, int, int]]) -> str:
    path.write_text("id,arrival_time,input_len,output_len\n"
                    + "".join(f"{i},0,{n},{o}\n" for i, n, o in rows))  # fmt: skip
    return str(path)


def traces(tmp: Path) -> dict[str, tuple[str, int]]:
    """name -> (trace path, max_concurrency)."""
    alone = [(f"a{i}", 64 + (i * 197) % 1900, 48) for i in range(16)]
    burst = [(f"b{i}", 256 + (i * 173) % 1300, 32 + 8 * (i % 4)) for i in range(16)]
    held = [(f"h{i}", 100 + (i * 331) % 1500, 24 + 4 * (i % 5)) for i in range(20)]
    return {
        "alone": (_csv(tmp / "alone.csv", alone), 1),
        "burst": (_csv(tmp / "burst.csv", burst), 8),
        "held_out": (_csv(tmp / "held.csv", held), 4),
    }


@contextlib.contextmanager
def client_priority(nice: int) -> Iterator[None]:
    """Run this thread (the replay's event loop) at ``nice`` where allowed (root), as
    the conftest's server runs: on a small shared machine the neighbours' load would
    otherwise delay the client's reads (docs/calibration.md, "On a shared CPU")."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)  # back up is always allowed


def server_knobs(server: VLLMServer) -> dict[str, Any]:
    """What the server is (not fitted): block size and KV blocks from its /metrics, and
    vLLM's CPU defaults for the OpenAI server (2048 batched tokens, 128 sequences)."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as resp:
        _, info = parse_metrics(resp.read().decode())
    assert info is not None
    return {
        "block_size": server.block_size,
        "num_blocks": int(float(info["num_gpu_blocks"])),
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 128,
        "max_model_len": server.max_model_len,
    }


async def measure_and_predict(server: VLLMServer, tmp: Path) -> dict[str, Any]:
    """One attempt: a warm-up run, then ``ROUNDS`` rounds of A, A', B; fit on the A
    runs, predict the B runs; the check (``predict_repeats``) with the fit beside it."""
    runs: dict[str, list[str]] = {"alone": [], "burst": [], "held_out": []}
    tmp.mkdir(parents=True, exist_ok=True)
    plan = traces(tmp)

    async def run(name: str, run_id: str, seed: int) -> str:
        trace, conc = plan[name]
        result = await run_async({
            "trace": trace, "target": server.url, "out_dir": str(tmp / "runs"),
            "run_id": run_id, "seed": seed,
            "arrival": {"mode": "saturated", "max_concurrency": conc},
            "backend": {"name": "vllm-tokens", "options": {"model": server.model}},
        })  # fmt: skip
        assert all(r.status == "ok" for r in result.records), run_id
        return str(result.run_dir)

    with client_priority(CLIENT_NICE):
        await run("burst", "warm-up", 10_000)  # not used: the server's first batches are slow
        for k in range(ROUNDS):
            for name in runs:
                runs[name].append(await run(name, f"{name}-{k}", k))
    cal = calibrate(runs["alone"] + runs["burst"], base=server_knobs(server),
                    self_check=False)  # fmt: skip
    cal.write(tmp / "engine.json")
    check = predict_repeats(runs["held_out"], cal.engine)
    # the A runs replayed by their own fit (in sample): beside the held-out figures they
    # tell a fit that misses its own runs from held-out runs the fit does not generalise to
    check["calibration_runs"] = {
        name: predict_repeats(runs[name], cal.engine) for name in ("alone", "burst")
    }
    fit = {k: cal.fit[k] for k in ("prefill", "decode", "lone_constant")}
    lone = fit["lone_constant"]
    check["lone_constant"] = {
        "c_ms": lone["c_ms"], "shares_of_c": lone.get("shares_of_c"),
        "near_ties": near_tie_predictions(cal.engine, lone, runs["held_out"]),
    }  # fmt: skip
    (tmp / "calibration_report.json").write_text(
        json.dumps({"engine": cal.engine, "fit": fit, "held_out": check}, indent=2)
    )
    print(figures(check))
    return check


def near_tie_predictions(engine: dict[str, Any], lone: dict[str, Any], held: list[str]
                         ) -> dict[str, Any] | None:
    """The held-out p50 TTFT predicted with each split of the lone constant whose error on
    the calibration runs is within ``NEAR_TIE_PCT`` points of the chosen one's (at most
    ``NEAR_TIES``): how far the runs leave the split, and with it the prediction, open."""
    if "tried" not in lone:
        return None
    best = lone["tried"][0]["median_abs_pct_error"]
    near = [t for t in lone["tried"] if t["median_abs_pct_error"] <= best + NEAR_TIE_PCT]
    a, b, _ = engine["prefill_coeffs"]
    config = replay_config(load(held[0]))
    p50s = []
    for t in near[:NEAR_TIES]:
        parts = [round(t[k.removesuffix("_ms")] * SPLIT_STEPS) for k in PARTS]
        knobs = engine | knobs_of_split(a, b, lone["c_ms"], parts)
        p50s.append(float(ok_rows(simulate(config, engine=knobs))["ttft_ms"].median()))
    return {"splits": len(near), "predicted_p50_min": min(p50s), "predicted_p50_max": max(p50s)}


def figures(check: dict[str, Any]) -> str:
    """One attempt's p50s, predicted vs measured, held-out and calibration runs, TTFT by
    admission too (``predict_repeats``): what a miss is read from (docs/calibration.md)."""
    parts = []
    for name, c in [("held-out", check), *check.get("calibration_runs", {}).items()]:
        for metric in ("ttft_ms", "tpot_ms"):
            m = c[metric]
            parts.append(
                f"{name} {metric} {m['predicted_p50']:.1f}/{m['measured_p50']:.1f} "
                f"({m['error_pct']:+.1f} %, spread {m['spread_pct'] or 0:.0f} %)"
            )
        for k, a in c["ttft_ms"].get("by_admission", {}).items():
            if a["error_pct"] is not None:
                parts.append(f"{name} ttft {k} {a['predicted_p50']:.1f}/{a['measured_p50']:.1f} "
                             f"({a['error_pct']:+.1f} %)")  # fmt: skip
    lone = check.get("lone_constant")
    if lone and lone["shares_of_c"]:  # what a joining request pays of c: all but the wake
        shares = ", ".join(
            f"{k.removesuffix('_ms')} {v:.1f}" for k, v in lone["shares_of_c"].items()
        )
        parts.append(f"lone constant c {lone['c_ms']:.1f} ms ({shares}; the rest in the step)")
    if lone and lone.get("near_ties"):
        t = lone["near_ties"]
        parts.append(f"held-out ttft predicted {t['predicted_p50_min']:.1f}..."
                     f"{t['predicted_p50_max']:.1f} by the {t['splits']} splits within "
                     f"{NEAR_TIE_PCT:g} point(s) of the chosen one's error")  # fmt: skip
    return "predicted/measured p50 ms: " + "; ".join(parts)


def tolerance_pct(c: dict[str, Any]) -> float:
    """±15 %, or the held-out runs' own spread (max − min of their p50s over the pooled
    p50) when that is wider: a prediction cannot be judged finer than the identical
    runs it is judged against agree (docs/calibration.md, "On a shared CPU")."""
    return max(TOLERANCE_PCT, float(c["spread_pct"] or 0.0))


def misses(check: dict[str, Any]) -> list[str]:
    """The metrics whose prediction is outside its tolerance, each said in one line."""
    out = []
    for metric in ("tpot_ms", "ttft_ms"):
        c = check[metric]
        if abs(c["error_pct"]) > tolerance_pct(c):
            out.append(
                f"p50 {metric}: predicted {c['predicted_p50']:.2f} ms, measured "
                f"{c['measured_p50']:.2f} ms over {ROUNDS} runs ({c['error_pct']:+.1f} %, "
                f"bound ±{tolerance_pct(c):.1f} %; per run "
                f"{[round(x, 2) for x in c['measured_p50_per_run']]})"
            )
    return out


def test_tolerance_is_the_runs_spread_when_they_disagree_more() -> None:
    quiet = {"spread_pct": 12.0, "error_pct": -16.6, "predicted_p50": 32.0,
             "measured_p50": 38.4, "measured_p50_per_run": [35.0, 39.6]}  # fmt: skip
    assert tolerance_pct(quiet) == TOLERANCE_PCT
    assert misses({"tpot_ms": quiet | {"error_pct": 3.0}, "ttft_ms": quiet})[0].startswith(
        "p50 ttft_ms: predicted 32.00 ms, measured 38.40 ms"
    )
    noisy = quiet | {"spread_pct": 34.0, "error_pct": -18.4}
    assert tolerance_pct(noisy) == 34.0
    assert misses({"tpot_ms": noisy, "ttft_ms": noisy}) == []


def test_figures_say_each_p50_with_its_error_and_admission_class() -> None:
    m = {"predicted_p50": 60.7, "measured_p50": 50.8, "error_pct": 19.4, "spread_pct": 9.0}
    adm = {"joined": {"predicted_p50": 62.0, "measured_p50": 50.0, "error_pct": 24.0},
           "first_wave": {"predicted_p50": None, "measured_p50": 40.0,
                          "error_pct": None}}  # fmt: skip
    burst = {"ttft_ms": m, "tpot_ms": m | {"error_pct": -2.0}}
    lone = {"c_ms": 9.84, "shares_of_c": {"request_overhead_ms": 0.2, "idle_wake_ms": 0.0,
                                          "intake_ms": 0.7},
            "near_ties": {"splits": 7, "predicted_p50_min": 52.0,
                          "predicted_p50_max": 61.0}}  # fmt: skip
    text = figures({"ttft_ms": m | {"by_admission": adm}, "tpot_ms": m,
                    "calibration_runs": {"burst": burst}, "lone_constant": lone})  # fmt: skip
    assert text.startswith("predicted/measured p50 ms: held-out ttft_ms 60.7/50.8 (+19.4 %, ")
    assert "held-out ttft joined 62.0/50.0 (+24.0 %)" in text
    assert "first_wave" not in text  # no prediction, nothing to say
    assert "burst tpot_ms 60.7/50.8 (-2.0 %, spread 9 %)" in text
    assert "lone constant c 9.8 ms (request_overhead 0.2, idle_wake 0.0, intake 0.7; the " \
        "rest in the step)" in text
    assert text.endswith("held-out ttft predicted 52.0...61.0 by the 7 splits within 1 "
                         "point(s) of the chosen one's error")  # fmt: skip


@pytest.mark.timeout(ATTEMPTS * 300)  # each attempt ~100–240 s on this machine
async def test_calibrated_engine_predicts_a_held_out_trace(
    vllm_server: VLLMServer, tmp_path: Path
) -> None:
    # one more attempt (fresh runs, fresh fit) when the first misses: on this shared
    # machine a miss has been one-sided noise about one run in ten (docs/calibration.md)
    seen: list[str] = []
    for attempt in range(ATTEMPTS):
        check = await measure_and_predict(vllm_server, tmp_path / f"attempt-{attempt}")
        missed = misses(check)
        if not missed:
            return
        seen += [f"attempt {attempt + 1}: {m}" for m in missed] + [figures(check)]
    pytest.fail("; ".join(seen))
