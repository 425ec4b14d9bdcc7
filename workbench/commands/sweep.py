"""``workbench sweep``: one run per point of a grid, or an SLO capacity search; run
directories under ``OUT/SWEEP_ID/runs/``, the same ``--sweep-id`` again resumes
(docs/sweeps.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from workbench.commands._axes import (
    add_axis_arguments,
    config_from_args,
    json_items,
)
from workbench.commands._flags import GivenItems, flag_sources, note, value_flag
from workbench.config.validation import json_or_text, parse_json
from workbench.errors import ConfigError, ExitCode

NAME = "sweep"
HELP = "run a trace at every point of a grid (rate, concurrency, any field) or search the " \
       "highest load that holds an SLO"

EPILOG = """examples:
  workbench sweep --trace T --virtual --over arrival.rate=0.5,1,2,4 \\
      --slo 'ttft_ms:p90<=2000' --slo 'tpot_ms:p90<=50' --repeats 3 -o sweeps
  workbench sweep --trace T --target http://127.0.0.1:8000 --backend vllm-tokens \\
      --capacity arrival.max_concurrency --lo 1 --hi 64 --tolerance 2 --slo 'ttft_ms:p90<=2000'
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    add_axis_arguments(p)
    p.set_defaults(sweep_bounds_ok=True)
    p.add_argument("--target", help="server root URL, or 'sim' for the embedded engine")
    p.add_argument("--engine", action=GivenItems, field="target.engine", keyed=True, default=[],
                   metavar="KEY=VALUE",
                   help="embedded-engine knob for every point (repeatable)")
    g = p.add_argument_group("what varies")
    g.add_argument("--over", action=GivenItems, field="", keyed=True, resolve=_axis_field,
                   default=[], metavar="PATH=V1,V2,...",
                   help="an axis and its values (repeatable: the grid of every combination); "
                        "PATH is a RunConfig field: arrival.rate, max_concurrency, "
                        "tool_wait_scale, engine.num_blocks, ...")
    g.add_argument("--points", metavar="JSON",
                   help='an explicit list of points, e.g. \'[{"rate": 1}, {"rate": 2}]\'')
    g.add_argument("--capacity", metavar="PATH",
                   help="search PATH for the highest value at which the SLO holds")
    value_flag(g, "--lo", type=float, field="capacity.lo",
               help="capacity search: lower end of the range")
    value_flag(g, "--hi", type=float, field="capacity.hi",
               help="capacity search: upper end of the range")
    value_flag(g, "--tolerance", type=float, field="capacity.tolerance",
               help="capacity search: bracket width to stop at")
    value_flag(g, "--grow", type=float, default=2.0, field="capacity.grow",
               help="capacity search: bracket growth")
    value_flag(g, "--max-probes", type=int, default=24, field="capacity.max_probes",
               help="capacity search: probe budget")
    v = p.add_argument_group("server configurations (docs/sweeps.md, 'Server sweeps')")
    v.add_argument("--serve", metavar="'CMD ... {param} ...'",
                   help="start this server per server point (in its own process group, "
                        "stopped after its client points); it must serve --target")
    v.add_argument("--serve-over", action="append", default=[], metavar="PARAM=V1,V2,...",
                   help="a server parameter and its values (repeatable: every combination)")
    value_flag(v, "--serve-ready-timeout", type=float, default=600.0, metavar="S",
               help="seconds a server may take to answer /health or /v1/models (600)")
    value_flag(v, "--serve-grace", type=float, default=20.0, metavar="S",
               help="seconds between SIGTERM and SIGKILL of a server's group (20)")
    s = p.add_argument_group("how")
    value_flag(s, "--repeats", type=int, default=1, field="sweep.repeats",
               help="runs per point (default 1)")
    value_flag(s, "--stop-margin", type=float, field="sweep.stop_margin",
               help="stop once points break the SLO by more than this fraction (0.5: 50 %%)")
    value_flag(s, "--stop-after", type=int, default=1, field="sweep.stop_after",
               help="... this many points in a row (default 1)")
    s.add_argument("--virtual", action="store_true",
                   help="run every point through the embedded engine in virtual time")
    value_flag(s, "--parallel", type=int, default=None, metavar="N", field="sweep.parallel",
               help="virtual time: points (a capacity search: probes a round) run in this "
               "many processes at once (default: the cores this process may use; 1: "
               "one at a time, on this process)")
    s.add_argument("--sweep-id", help="sweep directory name (same name again: resume)")
    s.add_argument("--label", help="label of the sweep in plots and reports")
    value_flag(s, "--gpus", type=int, field="sweep.gpus",
               help="GPUs per server instance: the Pareto plot shows output tokens/s per GPU")


def _axis_field(path: str) -> str:
    """The config field an ``--over`` path names (``rate``: ``arrival.rate``), by which a
    refused point value names its ``--over`` item; the path as written if it names none
    (the sweep says so when it reads it)."""
    import workbench.sweeps.spec as spec_mod

    try:
        return str(spec_mod.resolve_path(path))
    except ConfigError:
        return path


def parse_over(items: list[str]) -> dict[str, list[Any]]:
    over: dict[str, list[Any]] = {}
    for item in items:
        path, sep, values = item.partition("=")
        if not sep or not values:
            raise ConfigError(f"--over {item!r}: expected PATH=V1,V2,... (e.g. arrival.rate=1,2)")
        over[path.strip()] = [json_or_text("--over", v.strip())
                              for v in values.split(",") if v.strip()]
    return over


def run(args: argparse.Namespace) -> int:
    import workbench.sweeps.spec as spec_mod

    extra: dict[str, Any] = {"target.url": args.target} if args.target else {}
    if args.engine:
        extra["target.engine"] = json_items(args.engine, "--engine")
    over: Any = None
    if args.capacity:
        rate = args.lo if spec_mod.resolve_path(args.capacity) == spec_mod.RATE else None
        if rate is not None:  # the base config's rate is --lo's
            note(args, spec_mod.RATE, flag_sources(args).get("capacity.lo"))
        if args.points:
            raise ConfigError("--capacity searches its axis: other axes by --over, not --points")
        over = parse_over(args.over) if args.over else None  # a search per configuration
    else:
        if bool(args.over) == bool(args.points):
            raise ConfigError("give the points: --over PATH=V1,V2 (repeatable) or --points JSON")
        try:  # parsed and bounded like every config value
            over = parse_over(args.over) if args.over else parse_json("--points", args.points)
        except ValueError as exc:
            raise ConfigError(f"--points: not JSON ({exc})") from None
        rate = spec_mod.swept_rate(spec_mod.expand(over))
    # a swept rate needs no --rate: the base config takes the first point's (or --lo)
    cfg = config_from_args(args, extra, {"arrival.rate": rate} if rate is not None else None)
    common = {"repeats": args.repeats, "virtual": args.virtual, "out_dir": cfg.out_dir or "sweeps",
              "sweep_id": args.sweep_id, "label": args.label,
              "max_error_rate": args.max_error_rate,
              "progress": lambda text: print(text, file=sys.stderr, flush=True)}
    # every bound given is the sweep's verdict, per-request ones too (docs/sweeps.md, "SLO");
    # the per-request ones are also each run's own slo (config_from_args)
    slo = ";".join(args.slo) if any(b.strip() for b in args.slo) else None
    serve = _serve(args)
    stopped: list[Any] = []  # the sweep as saved, if a signal stops it
    common["on_interrupted"] = stopped.append
    try:
        result = _run_sweep(args, cfg, over, slo, serve, common)
    except KeyboardInterrupt:  # what finished, as a finished sweep prints it; then exit 130
        if stopped:
            points = stopped[-1].points
            done = sum(p.get("status") == "done" for p in points)
            from workbench.plurals import counted

            print(f"INCOMPLETE (interrupted): {done} of {counted(len(points), 'point')} done")
            # the points done, marked as a finished sweep marks them (exit 130 all the same)
            _print_sweep(stopped[-1], _judged(stopped[-1], args.max_error_rate))
        raise
    over = _judged(result, args.max_error_rate)
    _print_sweep(result, over)
    return _exit_status(result, args.max_error_rate, over)


def _run_sweep(args: argparse.Namespace, cfg: Any, over: Any, slo: str | None, serve: Any,
               common: dict[str, Any]) -> Any:
    import workbench as wb

    if args.capacity:
        if args.lo is None or args.hi is None or args.tolerance is None:
            raise ConfigError("--capacity needs --lo, --hi and --tolerance")
        if not slo:
            raise ConfigError("--capacity needs at least one --slo bound")
        # floats: an integer axis (max_concurrency) is searched on integers all the same
        return wb.capacity_search(cfg, args.capacity, args.lo, args.hi, slo,
                                  tolerance=args.tolerance,
                                  grow=args.grow, max_probes=args.max_probes,
                                  parallel=args.parallel, over=over, **common)
    return wb.sweep(cfg, over, slo=slo, stop_margin=args.stop_margin,
                    stop_after=args.stop_after, parallel=args.parallel,
                    serve=serve, gpus=args.gpus, **common)


def _print_sweep(result: Any, over: Mapping[int, Any] | None = None) -> None:
    """The sweep's headline, table (``over``: the points over ``--max-error-rate``,
    marked), search brackets, best point and directory."""
    from workbench.report.headline import sweeps_headline

    print(sweeps_headline({result.label: result}))  # the capacity sentence, on top
    print(_table(result, over or {}))
    if result.manifest.stopped_early:
        print(f"stopped early: {result.manifest.stopped_early['reason']}")
    if result.capacity:  # the search's bracket; the capacity itself is in the headline
        for line in search_lines(result.capacity):
            print(line)
    if any(p.get("status") == "done" for p in result.points):
        from workbench.report.pareto import best_row, best_sentence

        best, row = best_sentence(result), best_row(result)
        if row is not None and int(row["point"]) in (over or {}):  # marked, not silently used
            best += (' It is over --max-error-rate (marked in the table\'s "over '
                     '--max-error-rate" column).')
        print(best)
    print(f"sweep directory: {result.sweep_dir}")


def search_lines(c: dict[str, Any]) -> list[str]:
    """A capacity search's bracket per configuration, as the command prints it: ``"search
    of arrival.rate: found, bracket [2, 2.5] (tolerance 0.5, 1 probe in 1 round)"``."""
    import workbench.sweeps.spec as spec_mod
    from workbench.metrics.wording import sig
    from workbench.plurals import counted

    out = []
    for one in c.get("configurations") or [c]:
        bracket = ", ".join(sig(v) if v is not None else "–" for v in one["bracket"])
        where = f" at {spec_mod.label(one['params'])}" if one.get("params") else ""
        out.append(f"search of {c['axis']}{where}: {one['status']}, bracket [{bracket}] "
                   f"(tolerance {sig(c['tolerance'])}, "
                   f"{counted(len(one.get('probes') or []), 'probe')} "
                   f"in {counted(one.get('rounds', '?'), 'round')})")
    return out


def _serve(args: argparse.Namespace) -> Any:
    from workbench.sweeps.serve import ServeSpec

    if args.serve is None:
        if args.serve_over:
            raise ConfigError("--serve-over needs --serve 'CMD ... {param} ...'")
        return None
    if args.capacity:
        raise ConfigError("--serve runs a grid (--over or --points), not --capacity")
    over = parse_over(args.serve_over)
    return ServeSpec(args.serve, over, args.serve_ready_timeout, args.serve_grace).check()


#: runs named in the note on runs made under another ``--max-error-rate``, at most
NOTE_RUNS = 10
MANIFEST_S, MANIFESTS = "its manifest's", "their manifests'"  # (the rate in it)


def _judged(result: Any, max_error_rate: float) -> dict[int, list[str]]:
    """``judge_error_rate``'s verdict, kept in the sweep's manifest (the one write of it)."""
    from workbench.sweeps.store import write_error_rate

    over = judge_error_rate(result, max_error_rate)
    write_error_rate(result, max_error_rate, over)
    return over


def judge_error_rate(result: Any, max_error_rate: float) -> dict[int, list[str]]:
    """``{point index: a line per run}`` of the points with a run in which more than
    ``max_error_rate`` of the requests failed, judged as ``replay --max-error-rate`` judges
    its run and said in its words (``_run_end``): ``"point 1 (rate=4) run p001-r0: 3 of 8
    requests failed, more than --max-error-rate 0"``; by the rate given now (a resumed
    sweep's reused runs too). Judges only: ``store.write_error_rate`` keeps the verdict."""
    from workbench.commands._run_end import over_error_rate, run_exit_status

    over: dict[int, list[str]] = {}
    for p in result.manifest.points:
        said = []
        for run in p.get("runs") or []:
            m = run.get("metrics") or {}
            errors, ok = int(m.get("errors") or 0), int(m.get("ok") or 0)
            if run_exit_status(None, errors=errors, ok=ok,
                               max_error_rate=max_error_rate) == ExitCode.ERROR_RATE:
                said.append(f"point {p['index']} ({p['label']}) run {run['run_id']}: "
                            f"{over_error_rate(errors, ok, max_error_rate)}")
        if said:
            over[p["index"]] = said
    return over


def _exit_status(result: Any, max_error_rate: float, over: dict[int, list[str]]) -> int:
    """The sweep's exit status, each point's runs judged by the rule of every command that
    makes a run (``_run_end.run_exit_status``): 4 (``ExitCode.ERROR_RATE``) when a point's
    run failed more than ``max_error_rate`` of its requests (``over``: a line per such run,
    on stderr); else 1 (``ExitCode.FAILED``) when a point failed (its server did not serve
    it) or a point's run did not finish whole, each named on stderr; else 0
    (docs/sweeps.md, "A sweep directory"). A run made under another ``--max-error-rate``
    (a resumed sweep's) is named in a note: its manifest keeps the rate it was made with."""
    from workbench.commands._run_end import run_exit_status
    from workbench.plurals import noun
    from workbench.report.tables import run_end_note
    from workbench.storage.rundir import read_manifest

    worst = ExitCode.COMPLETED
    made_with: dict[float, list[str]] = {}  # runs made under another rate, by that rate
    for p in result.points:
        if p.get("status") == "failed":
            f = p.get("failure") or {}
            print(f"point {p['index']} ({p['label']}) failed: {f.get('reason')}",
                  file=sys.stderr)
            if f.get("log_tail"):
                print("  " + f["log_tail"][-1500:].replace("\n", "\n  "), file=sys.stderr)
            worst = max(worst, ExitCode.FAILED)
        for run in p.get("runs") or []:
            manifest = read_manifest(result.sweep_dir / run["run_dir"])
            if manifest.max_error_rate not in (None, max_error_rate):
                made_with.setdefault(manifest.max_error_rate, []).append(run["run_id"])
            status = run_exit_status(manifest.status)
            if status != ExitCode.COMPLETED:
                print(f"point {p['index']} ({p['label']}) run {run['run_id']}: "
                      f"{run_end_note(manifest)}", file=sys.stderr)
                worst = max(worst, status)
    for line in (line for lines in over.values() for line in lines):
        print(line, file=sys.stderr)
        worst = max(worst, ExitCode.ERROR_RATE)
    for rate, ids in made_with.items():
        n, named = len(ids), ", ".join(ids[:NOTE_RUNS])
        if n > NOTE_RUNS:
            named += f" and {n - NOTE_RUNS} more"
        print(f"note: {noun(n, 'run')} {named} {noun(n, 'was', 'were')} made with "
              f"--max-error-rate {rate:g} ({noun(n, MANIFEST_S, MANIFESTS)}, by which "
              f"workbench report judges "
              f"{noun(n, 'it', 'them')}); this sweep judged {noun(n, 'it', 'them')} by "
              f"--max-error-rate {max_error_rate:g}", file=sys.stderr)
    return worst


def _table(result: Any, over: Mapping[int, Any] | None = None) -> str:
    """The report's points table (``sweep_tables.points_table``: its names, its order, the
    SLO's own numbers beside the p90s every sweep shows), the verdict column ``SLO held``
    (the headline above names the SLO), ``over``'s points marked (docs/sweeps.md, "A sweep
    directory"), and its caption under it."""
    if result.frame.empty:
        return "(no point finished)"
    from workbench.report.headline import sig
    from workbench.report.sweep_tables import POINTS_CAPTION, points_table

    df = points_table({result.label: result}, held="SLO held", over=over or {})
    # two spaces between columns (pandas' one space ran "0.639 0.0337" together)
    rows = [[str(c) for c in df.columns],
            *([v if isinstance(v, str) else str(v) if isinstance(v, bool) else sig(v)
               for v in row] for row in df.itertuples(index=False))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(df.columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([*lines, POINTS_CAPTION])
