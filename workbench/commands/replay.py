"""``workbench replay``: replay a trace against a URL or the embedded engine."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from workbench.catalogs.requests import LATENCY, SCALAR_LATENCY
from workbench.commands._axes import add_axis_arguments, config_from_args
from workbench.commands._run_end import over_error_rate, run_exit_status
from workbench.errors import ExitCode

NAME = "replay"
HELP = "replay a trace against a serving endpoint (--target URL) or the embedded engine"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_axis_arguments(p)
    p.add_argument("--target", help="server root URL, or 'sim' for the embedded engine")
    p.add_argument("--dry-run", action="store_true", help="print the plan; send nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(p)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print the run's numbers as JSON (the summary's main keys) instead of "
                        "the headline")


def run(args: argparse.Namespace) -> int:
    extra = {"target.url": args.target} if args.target else {}
    cfg = config_from_args(args, extra)
    if args.dry_run:
        cfg = cfg.replace(dry_run=True)
    with headline_if_stopped(cfg, args) as told:
        result = replay_with_progress(cfg, progress=not (args.no_progress or cfg.dry_run),
                                      on_cancelled=told, max_error_rate=args.max_error_rate)
    if cfg.dry_run:  # the plan, its arrival span included (warned about on stderr past a day)
        print(json.dumps(result.manifest.plan, indent=2))
        return 0
    return finish(result, cfg, args)


@contextlib.contextmanager
def headline_if_stopped(cfg: Any, args: argparse.Namespace) -> Iterator[Callable[[Any], None]]:
    """Around a run: if a signal stops it, print the headline of what was saved (marked
    INCOMPLETE (cancelled)) and its run directory, as a finished run prints them, before
    the interrupt goes on to its one line and exit 130 (README, "Exit codes")."""
    stopped: list[Any] = []
    try:
        yield stopped.append
    except KeyboardInterrupt:
        if stopped:
            finish(stopped[-1], cfg, args)
        raise


def finish(result: Any, cfg: Any, args: argparse.Namespace, digest: bool = False) -> int:
    """Print a finished run and its digest; the command's exit status (one rule for every
    command that makes or reads a run: ``_run_end.run_exit_status``)."""
    from workbench.metrics import summary_of  # pandas: not held through the run

    summary = summary_of(result, cfg.slo)
    print_result(summary, result, args)
    if digest:
        from workbench.report.canonical import run_digest

        print("digest:", run_digest(result, cfg.slo))
    if result.run_dir:
        print(f"run directory: {result.run_dir}")
    errors, ok = int(summary.get("errors") or 0), int(summary.get("ok") or 0)
    status = run_exit_status(getattr(result.manifest, "status", None),
                             cancelled=result.cancelled, errors=errors, ok=ok,
                             max_error_rate=args.max_error_rate)
    if status == ExitCode.ERROR_RATE:
        print(f"workbench {args.command}: {over_error_rate(errors, ok, args.max_error_rate)}",
              file=sys.stderr)
    return status


def print_result(summary: dict, result: Any, args: argparse.Namespace) -> None:
    """The headline (``--percentiles``: and a line per latency metric) or, with ``--json``,
    the summary's main keys; cache notes on stderr."""
    if args.json:
        print(json.dumps(_brief(summary, result, args.percentiles), indent=2))
    else:
        from workbench.report.headline import run_headline

        print(run_headline(summary, result.manifest))
        if getattr(result.manifest, "status", None) == "partial":  # the counts, in words
            from workbench.report.tables import run_end_note, stop_line

            if (line := stop_line(result.manifest)) is not None:  # a dead server, say
                print(line)
            print(run_end_note(result.manifest, why=False))
        if args.percentiles:
            for line in percentile_lines(result, args.percentiles):
                print(line)
    print_cache_notes(summary)


def print_cache_notes(summary: dict) -> None:
    """The cache flush and the warm-cache warning, on stderr (docs/cache-isolation.md)."""
    flush = summary.get("cache_flush") or {}
    if flush.get("attempted") and not flush.get("ok"):
        print(f"note: prefix cache not reset before the run: {flush.get('detail')}",
              file=sys.stderr)  # fmt: skip
    warning = (summary.get("warm_cache") or {}).get("warning")
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr)
    if summary.get("ok") and not summary.get("cache_reported_requests"):
        print("note: the server reported no cached-token counts: actual_prefix_hit_rate is "
              "unknown (null), not 0", file=sys.stderr)  # fmt: skip


def replay_with_progress(cfg: Any, *, progress: bool = True,
                         on_cancelled: Callable[[Any], None] | None = None,
                         max_error_rate: float | None = None) -> Any:
    """Check the output folder and the trace first, then replay with a progress bar
    (``max_error_rate``: recorded in the manifest, ``run_async``)."""
    from tqdm import tqdm

    from workbench.executors.dispatch import run_async
    from workbench.replay.prepare import load_workload, run_on_fast_loop

    cfg.check_out_dir()
    workload = load_workload(cfg)
    bar = tqdm(unit="req", file=sys.stderr, desc="replay") if progress else None

    def on_progress(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        return run_on_fast_loop(run_async(cfg, progress=on_progress, workload=workload,
                                          on_cancelled=on_cancelled,
                                          max_error_rate=max_error_rate), cfg.executor.uvloop)
    finally:
        if bar is not None:
            bar.close()


def _brief(summary: dict, result: Any = None, percentiles: str | None = None) -> dict:
    keys = ("requests", "ok", "errors", *SCALAR_LATENCY, "actual_prefix_hit_rate",
            "cache_reported_requests", "cache_unreported_requests", "planned_prefix_hit_rate",
            "request_throughput_rps", "warmup", "response_mode")
    out = {k: summary[k] for k in keys if k in summary}
    if percentiles and result is not None:
        out["percentiles"] = percentile_table(result, percentiles)
    if summary.get("slo"):
        out["slo"] = summary["slo"]
    return out


def percentile_lines(result: Any, spec: str) -> list[str]:
    """``--percentiles``' lines under the headline: ``TTFT (ms): p50 30, p99 50`` (the
    metric as every table names it, ``catalog.with_unit``), and
    the count beside the percentiles it cannot resolve (``metrics.distribution.
    resolution``): `` (of 5 values; p90 needs 10, p99 100 to be other than the largest)``."""
    from workbench.catalogs.requests import with_unit
    from workbench.metrics.distribution import resolution, sample
    from workbench.metrics.frame import ok_rows
    from workbench.plurals import counted
    from workbench.report.headline import sig

    ok = ok_rows(result)
    lines = []
    for metric, qs in percentile_table(result, spec).items():
        n = sample(ok, metric).size
        needs = [(q, need) for q in qs
                 if (need := resolution(float(q[1:]))) is not None and 0 < n < need]
        thin = ", ".join(f"{q} {'needs ' if i == 0 else ''}{need}"
                         for i, (q, need) in enumerate(needs))
        note = (f" (of {counted(n, 'value')}; {thin} to be other than the largest)"
                if thin else "")
        lines.append(f"{with_unit(metric)}: " + ", ".join(f"{q} {sig(v)}" for q, v in qs.items())
                     + note)
    return lines


def percentile_table(result: Any, spec: str) -> dict[str, dict[str, float | None]]:
    """``--percentiles 50,99.9``: each latency metric's percentiles over ok requests (ms),
    the warm-up's left out as the summary leaves them out."""
    from workbench.commands._axes import parse_percentiles
    from workbench.metrics.frame import ok_rows
    from workbench.metrics.slo import ok_percentile

    qs = parse_percentiles(spec)
    ok = ok_rows(result)
    return {m: {f"p{q:g}": ok_percentile(ok, m, q) for q in qs} for m in LATENCY}
