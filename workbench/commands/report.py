"""``workbench report``: render stored runs into HTML reports (no traffic is replayed).

One run directory renders the ``replay`` notebook over the stored run (its
``run_dir`` parameter); several render ``compare``. ``--notebook`` picks another
bundled notebook or a ``.ipynb`` path; ``--param KEY=VALUE`` sets any other
parameter the notebook declares (VALUE is read as JSON when it parses).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

NAME = "report"
HELP = "render stored run directories into an HTML report (papermill + nbconvert)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="stored run directories")
    p.add_argument("--notebook", help="bundled notebook name (replay, compare, trace_explorer) "
                   "or a .ipynb path (default: replay for one run, compare for several)")
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="extra notebook parameter (repeatable)")
    p.add_argument("--run-id", help="report directory name under OUT_DIR")
    p.add_argument("-o", "--out", dest="out_dir", default="reports",
                   help="parent folder of the report directories (default: reports)")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def build_params(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The notebook to render and its parameters, from the command line."""
    from workbench.errors import ConfigError
    from workbench.report.store import resolve_run_dir

    dirs = [str(resolve_run_dir(d)) for d in args.run_dirs]
    notebook = args.notebook or ("replay" if len(dirs) == 1 else "compare")
    params: dict[str, Any] = {}
    if Path(notebook).stem == "replay" and dirs:
        if len(dirs) > 1:
            raise ConfigError("the replay notebook renders one run; use compare for several")
        params["run_dir"] = dirs[0]
        params["run_id"] = Path(dirs[0]).name
    elif dirs:
        params["run_dirs"] = dirs
    elif not args.notebook:
        raise ConfigError("give at least one RUN_DIR, or --notebook for a notebook without runs")
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param {item!r}: expected KEY=VALUE")
        params[key] = _value(value)
    if args.run_id:
        params["run_id"] = args.run_id
    return notebook, params


def run(args: argparse.Namespace) -> int:
    import sys

    notebook, params = build_params(args)  # bad run dirs fail before papermill is imported

    from papermill import PapermillExecutionError

    from workbench.report.render import render_report

    try:
        html = render_report(notebook, params, args.out_dir, show_code=args.show_code)
    except PapermillExecutionError as exc:
        print(f"workbench report: a cell of {notebook} failed ({exc.ename}: {exc.evalue}); "
              f"the partial report (code shown) is under {args.out_dir}", file=sys.stderr)
        return 1
    print(f"report: {html}")
    print(f"index:  {Path(args.out_dir) / 'index.html'}")
    return 0
