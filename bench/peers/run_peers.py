"""workbench beside agentic-bench 0.2.0, in one run, against one loopback fake server.

What it does (method in ``bench/README.md``, "Method notes", "Peers"):

1. Makes (once) a venv outside the repo, ``$HOME/.cache/workbench/peers/agentic-bench``
   (``--venv``), with ``agentic-bench==0.2.0`` from PyPI.
2. Starts ``bench/fake_server.py`` on 127.0.0.1 in ``instant`` mode, then in
   ``timed`` mode (``--ttft-ms`` 50, ``--itl-ms`` 10). With ``--pin`` the server
   runs on core 0 and each client on core 1 (``taskset``); only do that on a
   quiet machine — a core shared with other jobs delays whoever is pinned to it.
3. For each mode and concurrency (32 and 256) and ``--repeat`` rounds, runs
   agentic-bench and then workbench (order alternates per round), each as its own
   process, with the same workload: independent requests,
   512-token prompts, 64 output tokens, no warm-up, no gaps, no ``/metrics``.
   Requests: ``--requests`` (200) at c=32; ``max(--requests, 4·c)`` at c=256 so
   the cap is held for more than one wave.
4. After each client run it reads the server's truth (``GET /debug/requests``):
   per request ``arrival_ns`` (handler start), the write time of every token
   event, all ``perf_counter_ns`` (CLOCK_MONOTONIC, same base as the clients).

Reported per client: requests/s and streamed output tokens/s, successes only,
over a window that ends at the last completion and starts, for agentic-bench,
at its first request's start stamp and, for workbench, at the run's start
(before any request was prepared: wider, so never in workbench's favour —
workbench stamps dispatch when the bytes go out, later than a pre-POST stamp);
the TTFT bias = client TTFT − server TTFT (``first_token_ns −
arrival_ns``) and the ITL bias = client ITL − server gap between token writes.
workbench's records carry the request id the server logged, so its bias is per
request (mean, p50, p99); agentic-bench sends no id, so its bias is the
difference of means over the same request set (exact for the mean). Ratios are
workbench ÷ agentic-bench of the medians over rounds.

    .venv/bin/python bench/peers/run_peers.py --repeat 3 --json-out /tmp/peers.json

Every loop is bounded: fixed counts, a timeout on every subprocess, loopback only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PEER = "agentic-bench==0.2.0"
DEFAULT_VENV = Path.home() / ".cache" / "workbench" / "peers" / "agentic-bench"
RUN_TIMEOUT_S = 300


# ----------------------------------------------------------------- environment
def ensure_venv(venv: Path) -> Path:
    """The peer's python, installing ``agentic-bench==0.2.0`` into ``venv`` if missing."""
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import importlib.metadata as m; print(m.version('agentic-bench'))"]
    if py.exists():
        done = subprocess.run(check, capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip() == "0.2.0":
            return py
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
    subprocess.run([str(py), "-m", "pip", "install", "-q", PEER], check=True, timeout=600)
    return py


PIN = False  # --pin: server on core 0, clients on core 1
#: the clients of one round, in this order on even rounds and reversed on odd ones
CLIENTS = ("agentic-bench", "floor", "workbench")


def pin(core: int) -> list[str]:
    """``taskset -c core`` with ``--pin``, more than one core and taskset present."""
    if PIN and (os.cpu_count() or 1) > 1 and shutil.which("taskset"):
        return ["taskset", "-c", str(core)]
    return []


class FakeServer:
    def __init__(self, mode: str, ttft_ms: float, itl_ms: float) -> None:
        cmd = [*pin(0), sys.executable, str(ROOT / "bench" / "fake_server.py"), "--mode", mode,
               "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # "LISTENING http://127.0.0.1:PORT"
        if not line.startswith("LISTENING "):
            self.close()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.url = line.split()[1]

    def _call(self, method: str, path: str) -> bytes:
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            data: bytes = resp.read()
            return data

    def reset(self) -> None:
        self._call("POST", "/debug/reset")

    def truth(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self._call("GET", "/debug/requests"))
        return rows

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ----------------------------------------------------------------- the two clients
def cpu_of_children() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_abench(py: Path, url: str, n: int, c: int, prompt: int, output: int, tmp: Path) -> dict:
    out = tmp / f"abench-{c}-{time.monotonic_ns()}.jsonl"
    cmd = [*pin(1), str(py), "-m", "abench", "run", "--base-url", url, "--backend", "openai",
           "--dataset-name", "random", "--turns", "1", "--input-increment", str(prompt),
           "--output-len", str(output), "--num-sessions", str(n), "--max-concurrency", str(c),
           "--no-gaps", "--warmup-requests", "0", "--metrics-interval", "0",
           "--progress-interval", "0", "--disable-tqdm", "--system-prompt-len", "0",
           "--ready-check-timeout-sec", "10", "--output-file", str(out)]  # fmt: skip
    cpu0 = cpu_of_children()
    subprocess.run(cmd, check=True, capture_output=True, timeout=RUN_TIMEOUT_S, cwd=tmp)
    cpu = cpu_of_children() - cpu0
    run = json.loads(out.read_text().splitlines()[-1])
    turns = [t for s in run["sessions"] for t in s["turns"]]
    ok = [t for t in turns if t["success"]]
    window = max(t["end_ts"] for t in turns) - min(t["start_ts"] for t in turns)
    itl = [g for t in ok for g in t.get("itl_ms") or []]
    return {
        "client": "agentic-bench",
        "ok": len(ok),
        "requests": len(turns),
        "req_per_s": len(ok) / window,
        "tokens_per_s": sum(t["output_len"] for t in ok) / window,
        "ttft_ms": [t["ttft"] * 1e3 for t in ok],
        "itl_ms": itl,
        "process_cpu_s": cpu,
    }


def run_floor(url: str, n: int, c: int, prompt: int, output: int) -> dict:
    """``bench/floor_client.py``: sends and counts bytes, nothing else."""
    cmd = [*pin(1), sys.executable, str(ROOT / "bench" / "floor_client.py"), "--url", url,
           "--requests", str(n), "--concurrency", str(c), "--prompt", str(prompt),
           "--output", str(output)]  # fmt: skip
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    res = json.loads(done.stdout.strip().splitlines()[-1])
    per_req = {rid: {"dispatch_ns": w, "ttft_ms": (r - w) / 1e6, "token_times_ns": [r]}
               for rid, (w, r) in res["per_request"].items() if r}  # fmt: skip
    return {"client": "floor", "ok": n, "requests": n, "req_per_s": n / res["wall_s"],
            "tokens_per_s": n * output / res["wall_s"], "itl_ms": [],
            "ttft_ms": [v["ttft_ms"] for v in per_req.values()], "per_request": per_req,
            "run_cpu_s": res["cpu_s"], "process_cpu_s": res["cpu_s"], "reads": res["reads"]}


def run_workbench(url: str, n: int, c: int, prompt: int, output: int, tmp: Path,
                  workers: int = 1, http: str = "httptools",
                  pace_ms: str = "auto") -> dict:  # fmt: skip
    cmd = [*pin(1), sys.executable, str(ROOT / "bench" / "bench_client.py"), "--url", url,
           "--requests", str(n), "--concurrency", str(c), "--prompt", str(prompt),
           "--output", str(output), "--out-dir", str(tmp / f"wb-{time.monotonic_ns()}"),
           "--workers", str(workers), "--http", http, "--pace-ms", str(pace_ms)]  # fmt: skip
    cpu0 = cpu_of_children()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    cpu = cpu_of_children() - cpu0
    res = json.loads(done.stdout.strip().splitlines()[-1])
    recs = [json.loads(line) for line in (Path(res["run_dir"]) / "records.jsonl").open()]
    ok = [r for r in recs if r["status"] == "ok" and not r["warmup"]]
    per_req = {}
    for r in ok:
        times = r["token_times_ns"]
        per_req[r["request_id"]] = {
            "dispatch_ns": r["dispatch_ns"],
            "ttft_ms": (times[0] - r["dispatch_ns"]) / 1e6,
            "token_times_ns": times,
            "token_counts": r["token_counts"],
        }
    return {
        "client": "workbench",
        "ok": res["requests_ok"],
        "requests": res["requests"],
        "req_per_s": res["req_per_s"],
        "tokens_per_s": res["tokens_per_s"],
        "ttft_ms": [v["ttft_ms"] for v in per_req.values()],
        "itl_ms": [(b - a) / 1e6 for v in per_req.values()
                   for a, b in itertools.pairwise(v["token_times_ns"])],
        "per_request": per_req,
        "self": res.get("self"),
        "run_cpu_s": (res.get("self") or {}).get("cpu_s"),  # the measured run only
        "process_cpu_s": cpu,
    }  # fmt: skip


# ----------------------------------------------------------------- bias vs truth
def server_view(truth: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [t for t in truth if t.get("first_token_ns")]
    return {
        "ttft_ms": [(t["first_token_ns"] - t["arrival_ns"]) / 1e6 for t in rows],
        "itl_ms": [(b - a) / 1e6 for t in rows for a, b in itertools.pairwise(t["token_ns"])],
        "by_id": {t["request_id"]: t for t in rows},
    }


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def bias(client: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ttft_bias_ms_mean": _mean(client["ttft_ms"]) - _mean(server["ttft_ms"]),
        "itl_bias_ms_mean": (_mean(client["itl_ms"]) - _mean(server["itl_ms"]))
        if client["itl_ms"] and server["itl_ms"] else None,
        "server_ttft_ms_mean": _mean(server["ttft_ms"]),
        "server_itl_ms_mean": _mean(server["itl_ms"]) if server["itl_ms"] else None,
        "joined": 0,
    }  # fmt: skip
    per_req = client.get("per_request")
    if per_req:
        ttft_b, dispatch_b, recv_b = [], [], []
        for rid, c in per_req.items():
            t = server["by_id"].get(rid)
            if t is None:
                continue
            ttft_b.append(c["ttft_ms"] - (t["first_token_ns"] - t["arrival_ns"]) / 1e6)
            dispatch_b.append((t["arrival_ns"] - c["dispatch_ns"]) / 1e6)
            recv_b.append((c["token_times_ns"][0] - t["first_token_ns"]) / 1e6)
        out.update(
            joined=len(ttft_b),
            ttft_bias_ms_p50=_pct(ttft_b, 50),
            ttft_bias_ms_p99=_pct(ttft_b, 99),
            request_path_ms_mean=_mean(dispatch_b),  # client dispatch → server handler start
            response_path_ms_mean=_mean(recv_b),  # server write → client stamp
        )
    return out


def _mean(xs: list[float]) -> float:
    return float(statistics.fmean(xs)) if xs else float("nan")


# ----------------------------------------------------------------- the run
def one_point(server: FakeServer, py: Path, args: argparse.Namespace, c: int, rep: int,
              tmp: Path) -> list[dict[str, Any]]:  # fmt: skip
    n = args.requests if c <= 32 else max(args.requests, 4 * c)
    order = CLIENTS if rep % 2 == 0 else CLIENTS[::-1]
    rows = []
    for name in order:
        server.reset()
        if name == "agentic-bench":
            res = run_abench(py, server.url, n, c, args.prompt, args.output, tmp)
        elif name == "floor":
            res = run_floor(server.url, n, c, args.prompt, args.output)
        else:
            res = run_workbench(server.url, n, c, args.prompt, args.output, tmp, args.workers,
                                args.http, args.pace_ms)  # fmt: skip
        sv = server_view(server.truth())
        b = bias(res, sv)
        rows.append({
            "client": name, "concurrency": c, "rep": rep, "requests": n, "ok": res["ok"],
            "req_per_s": res["req_per_s"], "tokens_per_s": res["tokens_per_s"],
            "process_cpu_s": res["process_cpu_s"], "self": res.get("self"), **b,
            "run_cpu_s": res.get("run_cpu_s"),
            # CPU of the measured requests per token event (one event per output token)
            "cpu_us_per_event": (res["run_cpu_s"] / (res["ok"] * args.output) * 1e6)
            if res.get("run_cpu_s") is not None and res["ok"] else None,
        })  # fmt: skip
    return rows


def median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(mode: str, rows: list[dict[str, Any]], concurrencies: list[int]) -> list[str]:
    lines = [f"\n## {mode}", "",
             "| c | client | req/s | tokens/s | client CPU s (process / run) | CPU µs per token "
             "event | TTFT bias mean ms | p50 | p99 | ITL bias mean ms "
             "| release lag p99 ms (all / steady) | in-flight mean/peak | cpu_util |",
             "|" + " --- |" * 13]  # fmt: skip
    for c in concurrencies:
        meds = {}
        for name in CLIENTS:
            sel = [r for r in rows if r["client"] == name and r["concurrency"] == c]
            med = {k: median_of(sel, k) for k in (
                "req_per_s", "tokens_per_s", "process_cpu_s", "ttft_bias_ms_mean",
                "ttft_bias_ms_p50", "ttft_bias_ms_p99", "itl_bias_ms_mean", "run_cpu_s",
                "cpu_us_per_event")}  # fmt: skip
            # the per-round ratio to the floor, measured within one round, then its median
            ratios = []
            for r in sel:
                fl = [f for f in rows if f["client"] == "floor" and f["concurrency"] == c
                      and f["rep"] == r["rep"]]  # fmt: skip
                if fl and fl[0].get("cpu_us_per_event") and r.get("cpu_us_per_event"):
                    ratios.append(r["cpu_us_per_event"] / fl[0]["cpu_us_per_event"])
            med["floor_ratio"] = statistics.median(ratios) if ratios else None
            selfm = [r["self"] for r in sel if r.get("self")]
            lag = statistics.median([s["release_lag_ms"]["p99"] for s in selfm]) if selfm else None
            steady = [s["steady_release_lag_ms"]["p99"] for s in selfm
                      if (s.get("steady_release_lag_ms") or {}).get("p99") is not None]  # fmt: skip
            lags = f"{_f(lag, 2)} / {_f(statistics.median(steady), 2)}" if steady else _f(lag, 2)
            inflight = "–"
            if selfm:
                mean_in = statistics.median([s["in_flight"]["mean"] for s in selfm])
                inflight = f"{mean_in:.1f}/{max(s['in_flight']['peak'] for s in selfm)}"
            meds[name] = med
            util = statistics.median([s["cpu_util"] for s in selfm if s.get("cpu_util")]) \
                if selfm else None  # fmt: skip
            per_event = _f(med["cpu_us_per_event"], 1)
            if name != "floor" and med["floor_ratio"] is not None:
                per_event += f" ({med['floor_ratio']:.2f}× floor)"
            lines.append(
                f"| {c} | {name} | {_f(med['req_per_s'], 0)} | {_f(med['tokens_per_s'], 0)} | "
                f"{_f(med['process_cpu_s'], 2)} / {_f(med['run_cpu_s'], 2)} | {per_event} | "
                f"{_f(med['ttft_bias_ms_mean'], 2)} | "
                f"{_f(med['ttft_bias_ms_p50'], 2)} | {_f(med['ttft_bias_ms_p99'], 2)} | "
                f"{_f(med['itl_bias_ms_mean'], 3)} | {lags} | {inflight} | {_f(util, 2)} |"
            )
        a, w = meds["agentic-bench"], meds["workbench"]
        if a["req_per_s"] and w["req_per_s"]:
            per_round = []
            for rep in {r["rep"] for r in rows}:
                pair = {r["client"]: r["req_per_s"] for r in rows
                        if r["concurrency"] == c and r["rep"] == rep}  # fmt: skip
                if pair.get("agentic-bench") and pair.get("workbench"):
                    per_round.append(pair["workbench"] / pair["agentic-bench"])
            rounds = ", ".join(f"{x:.2f}" for x in sorted(per_round))
            lines.append(
                f"| {c} | **ratio wb/ab** | **{w['req_per_s'] / a['req_per_s']:.2f}×** "
                f"(rounds: {rounds}) | **{w['tokens_per_s'] / a['tokens_per_s']:.2f}×** "
                "| | | | | | | | | |"
            )
    return lines


def _f(x: float | None, nd: int) -> str:
    return "–" if x is None or x != x else f"{x:,.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--modes", nargs="+", default=["instant", "timed"])
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=1, help="workbench worker processes")
    ap.add_argument("--http", default="httptools", choices=("httptools", "aiohttp"),
                    help="workbench executor.http (default httptools)")
    ap.add_argument("--pace-ms", default="auto",
                    help="workbench executor.pace_ms: auto (default), 0 (off) or ms")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--pin", action="store_true",
                    help="pin the server to core 0 and each client to core 1 (only on a quiet box)")
    args = ap.parse_args(argv)
    global PIN
    PIN = args.pin

    py = ensure_venv(args.venv)
    all_rows: dict[str, list[dict[str, Any]]] = {}
    lines = [f"machine: {os.cpu_count()} cores, {os.uname().machine}, "
             f"load avg {os.getloadavg()[0]:.1f} at start; workbench: executor.workers "
             f"{args.workers}, executor.http {args.http}, "
             f"executor.pace_ms {args.pace_ms}"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="wb-peers-") as d:
        for mode in args.modes:
            server = FakeServer(mode, args.ttft_ms, args.itl_ms)
            try:
                rows = []
                for rep in range(args.repeat):
                    for c in args.concurrency:
                        rows.extend(one_point(server, py, args, c, rep, Path(d)))
            finally:
                server.close()
            all_rows[mode] = rows
            label = f"timed ({args.ttft_ms} ms TTFT, {args.itl_ms} ms ITL)"
            label = mode if mode == "instant" else label
            lines += report(label, rows, args.concurrency)
    lines.append(f"\nload avg at end {os.getloadavg()[0]:.1f}")
    print("\n".join(lines))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(all_rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
