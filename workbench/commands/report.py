"""``workbench report``: render stored run, sweep, plan or parity directories into HTML
(``build_params`` picks the notebook); no traffic is replayed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workbench.commands._axes import json_items
from workbench.errors import ConfigError, ExitCode

NAME = "report"
HELP = "render stored run directories into an HTML report (papermill + nbconvert)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="stored run directories, or sweep directories (sweep.json)")
    p.add_argument("--notebook", help="bundled notebook name (replay, compare, trace_explorer) "
                   "or a .ipynb path (default: replay for one run, compare for several)")
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="extra notebook parameter (repeatable)")
    p.add_argument("--run-id", help="report directory name under OUT_DIR")
    p.add_argument("-o", "--out", dest="out_dir", default="reports",
                   help="parent folder of the report directories (default: reports)")


def build_params(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The notebook to render and its parameters, from the command line."""
    from workbench.storage.rundir import resolve_run_dir
    from workbench.sweeps.store import is_sweep_dir

    # a capacity plan (workbench plan), a parity campaign (workbench parity): its notebook
    for marker, param, kind in (("plan.json", "plan_dir", "plan"),
                                ("parity.json", "parity_dir", "parity")):
        found = [d for d in args.run_dirs if (Path(d) / marker).is_file()]
        if found:
            if len(found) != 1 or len(args.run_dirs) != 1:
                raise ConfigError(f"give one {kind} directory ({marker}) at a time")
            args.param = [f"{param}={json.dumps(str(Path(found[0]).resolve()))}", *args.param]
            args.run_dirs = []
            args.notebook = args.notebook or kind
    sweeps = [d for d in args.run_dirs if is_sweep_dir(d)]
    if sweeps and len(sweeps) != len(args.run_dirs):
        raise ConfigError("give sweep directories or run directories, not both")
    dirs = [str(Path(d).resolve() if sweeps else resolve_run_dir(d)) for d in args.run_dirs]
    notebook = args.notebook or ("sweep" if sweeps else "replay" if len(dirs) == 1 else "compare")
    params: dict[str, Any] = {}
    if Path(notebook).stem == "sweep" and dirs:
        params["sweep_dirs"] = dirs
    elif Path(notebook).stem == "replay" and dirs:
        if len(dirs) > 1:
            raise ConfigError("the replay notebook renders one run; use compare for several")
        params["run_dir"] = dirs[0]
        params["run_id"] = Path(dirs[0]).name
    elif dirs:
        params["run_dirs"] = dirs
    elif not args.notebook:
        raise ConfigError("give at least one RUN_DIR, or --notebook for a notebook without runs")
    params.update(json_items(args.param, "--param"))
    if args.run_id:
        params["run_id"] = args.run_id
    return notebook, params


def run(args: argparse.Namespace) -> int:
    notebook, params = build_params(args)  # bad run dirs fail before papermill is imported

    from papermill import PapermillExecutionError

    from workbench.report.render import render_report

    run_dirs = [params["run_dir"]] if "run_dir" in params else params.get("run_dirs", [])
    status = _read_status(run_dirs)  # a damaged manifest or line: exit 2, nothing rendered
    try:
        html = render_report(notebook, params, args.out_dir, show_code=args.show_code)
    except PapermillExecutionError as exc:
        print(f"workbench report: a cell of {notebook} failed ({exc.ename}: {exc.evalue}); "
              f"the partial report (code shown) is under {args.out_dir}", file=sys.stderr)
        return 1
    print_report(html)
    return status


def _read_status(run_dirs: list[str]) -> int:
    """Say on stderr what of each run directory was damaged and how a run that did not
    complete ended (killed, cancelled, failed, partial, still running), as the report's
    first lines say it; the exit status: the worst of the runs' by the rule every command
    that makes or reads a run follows (``_run_end.run_exit_status``, by the
    ``--max-error-rate`` its manifest records, if any; a damaged run: 1). The
    report is rendered all the same (docs/run-directory.md, "Reading a run that is not
    whole")."""
    from workbench.commands._run_end import over_error_rate, run_exit_status
    from workbench.report.tables import run_end_note
    from workbench.storage.rundir import SUMMARY, read_json, read_manifest, run_damage

    worst = ExitCode.COMPLETED
    for d in run_dirs:
        for note in run_damage(d):
            print(f"workbench report: DAMAGED: {Path(d) / note}", file=sys.stderr)
            worst = max(worst, ExitCode.FAILED)
        manifest = read_manifest(d)  # read whole by run_damage just now
        ended = run_end_note(manifest)
        if ended:
            print(f"workbench report: {d}: {ended}", file=sys.stderr)
        summary = read_json(Path(d) / SUMMARY) if (Path(d) / SUMMARY).is_file() else {}
        errors, ok = int(summary.get("errors") or 0), int(summary.get("ok") or 0)
        status = run_exit_status(manifest.status, errors=errors, ok=ok,
                                 max_error_rate=manifest.max_error_rate)
        if status == ExitCode.ERROR_RATE:
            print(f"workbench report: {d}: "
                  f"{over_error_rate(errors, ok, manifest.max_error_rate or 0.0)} (the run's)",
                  file=sys.stderr)
        worst = max(worst, status)
    return worst


def print_report(html: Path) -> None:
    """The report's headline, as its first screen shows it, and where it and the index are."""
    from workbench.report.render import report_headline

    for line in report_headline(html):
        print(line)
    print(f"report: {html}")
    print(f"index:  {html.parent.parent / 'index.html'}")
