"""The ``coding-agent`` preset's fit, recomputed from the bundled sample.

Reads ``workbench/data/weka/cc_traces_sample.jsonl`` (28 captured Claude Code
conversations, 12 sub-agents) with the weka reader, prints the ``agentic`` keys fitted
to it (``workbench.workloads.agent_fit.fit``; the preset in
``workbench/workloads/standard.py`` is these keys) and the table of
docs/trace-formats.md, "The ``coding-agent`` preset and its fit": the data's p50 / p90 /
p99 beside those of the preset drawn with a fixed seed.

    .venv/bin/python bench/fit_coding_agent.py [--sessions 2000] [--seed 0] [PATH]

``PATH`` (another weka file or folder) measures other captures against the same preset:
a cross-check, not the fit.
"""

from __future__ import annotations

import argparse

from workbench import data
from workbench.traces.load import load_trace
from workbench.workloads import agent_fit
from workbench.workloads.standard import PRESETS, generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=str(data.path(agent_fit.SAMPLE)))
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    stats = agent_fit.measure(load_trace(args.path, fmt="weka"))
    fitted = agent_fit.fit(stats)
    preset = PRESETS["coding-agent"]
    print("fitted keys:", ",".join(f"{k}={v}" for k, v in fitted.items()))
    print("preset == fit:", fitted == preset)
    drawn = agent_fit.measure(generate(
        f"synthetic:agentic,preset=coding-agent,sessions={args.sessions},seed={args.seed}"))
    print()
    print(agent_fit.table(stats, drawn, preset))


if __name__ == "__main__":
    main()
