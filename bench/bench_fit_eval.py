"""What one evaluation of the preset fit costs (issue 41): CPU seconds per table and trial.

Method: load the published tables, keep the ones the fit sees (``fit.NEVER_FITTED``
out), and replay them as a trial of the search does (``quick``), timing each table with
``time.process_time`` (the machine is shared: wall time is not this process's). Then the
same evaluation again through the fit's cache (``fit.quick_errors``: nothing is replayed)
and, with ``--pass``, the trials of one pass of the search from ``fit.START`` (each
factor × and ÷ 1.5), counting the table replays the cache saves (a trial moving the
all-reduce replays no TP1 table, FP8 matmuls no 16-bit one). Run from the repo root:

    .venv/bin/python bench/bench_fit_eval.py [--pass]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from workbench.sim.presets import Factors, fit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pass", dest="one_pass", action="store_true",
                    help="also time one pass of the search from fit.START")
    args = ap.parse_args()
    tables = [t for t in fit.load_tables() if not any(n in t.name for n in fit.NEVER_FITTED)]
    total = 0.0
    with fit.using(fit.START):
        for t in tables:
            t0 = time.process_time()
            rows = fit.table_errors(t, quick=True)
            took = time.process_time() - t0
            total += took
            print(f"{took:7.2f} s {len(rows):4d} rows  {t.name}")
    print(f"one evaluation, every fitted table replayed: {total:.2f} s CPU")
    fit.quick_errors(tables, fit.START)
    t0 = time.process_time()
    fit.quick_errors(tables, fit.START)
    print(f"the same through the cache: {time.process_time() - t0:.4f} s CPU")
    if args.one_pass:
        trials = [dataclasses.replace(fit.START, **{f.name: round(min(
                      fit.FACTOR_BOUNDS[f.name][1], max(fit.FACTOR_BOUNDS[f.name][0],
                                                        getattr(fit.START, f.name) * m)), 6)})
                  for f in dataclasses.fields(Factors) if f.name not in fit.SWITCHES
                  for m in (1.5, 1 / 1.5)]
        before = len(fit._QUICK_ROWS)
        t0 = time.process_time()
        for trial in trials:
            fit.quick_errors(tables, trial)
        replays = len(fit._QUICK_ROWS) - before
        print(f"one pass, {len(trials)} trials: {time.process_time() - t0:.1f} s CPU, "
              f"{replays} table replays of {len(trials) * len(tables)}")


if __name__ == "__main__":
    main()
