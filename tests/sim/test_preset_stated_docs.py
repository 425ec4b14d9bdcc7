"""The errors docs/hardware.md states for the presets are the fit's record, digit for digit.

``fitted_factors.json`` holds the figures every preset states (``presets.stated``);
``test_preset_measurements.py`` re-derives that record from the shipped factors and each
fold's. This file holds the page against the record: the overall leave-one-source-out
and in-sample rows of "Fit", its per-(GPU, TP) and per-source tables, and the "Every
table" table's columns (each table's bound, the one ``test_preset_measurements.BOUNDS``
holds, and its leave-one-source-out figures). Nothing is replayed here: a record
rewritten without its page fails this file at once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import workbench.sim.presets as presets

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text(
    encoding="utf-8")
RECORD = json.loads(presets.FACTORS_FILE.read_text(encoding="utf-8"))
LOSO = RECORD["leave_one_source_out"]
CLASSES = ("itl", "throughput", "ttft", "latency")  # the page's column order


def _table_after(heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line starting with ``heading``
    (header and rule rows dropped)."""
    lines = PAGE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows: list[list[str]] = []
    for line in lines[start + (not lines[start].startswith("|")):]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def _pct(cell: str) -> str | None:
    """``"**11.6 %**"`` or ``"6.3 % (20; was 13.0)"`` -> ``"11.6"`` / ``"6.3"``; ``"—"``
    -> None."""
    m = re.match(r"\**(\d+(?:\.\d+)?) ?%", cell)
    return None if m is None else m.group(1)


def _one_decimal(x: float) -> str:
    """A record's share as the page prints it (``stated.error_pct``'s rounding)."""
    return f"{x:.1%}".rstrip("%")


def test_the_overall_rows_are_the_records() -> None:
    lines = PAGE.splitlines()
    for marker, key in (("| **leave-one-source-out**, every source", "held_out_error"),
                        ("| in sample (`in_sample`", "in_sample")):
        (line,) = [x for x in lines if x.startswith(marker)]
        cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
        got = dict(zip(CLASSES, map(_pct, cells), strict=True))
        assert got == {k: _one_decimal(RECORD[key][k]) for k in CLASSES}, key


def test_the_per_gpu_and_tp_table_is_the_records() -> None:
    rows = _table_after("Per GPU and TP (leave-one-source-out")
    cells = LOSO["by_gpu_tp"]
    assert [r[0] for r in rows] == sorted(cells)
    for row in rows:
        cell = cells[row[0]]
        for cls, text in zip(CLASSES, row[1:], strict=True):
            if cls not in cell:
                assert text == "—", (row[0], cls)
                continue
            assert _pct(text) == _one_decimal(cell[cls]), (row[0], cls, text)
            n = re.search(r"\((\d+);", text)
            assert n is not None and int(n.group(1)) == cell[f"{cls}_n"], (row[0], cls)


#: the page's name of each source -> the record's (``Table.source_group``)
SOURCES = {
    "Oracle OCI blog": "blogs.oracle.com/cloud-infrastructure/post/"
                       "serving-llama-31-405b-model-with-amd-mi300x-gpus",
    "vLLM buildkite 9515": "buildkite.com/vllm/performance-benchmark/builds/9515",
    "NeMo Framework docs": "docs.nvidia.com/nemo-framework/user-guide/latest/performance/"
                           "llama.html",
    "NIM 1.8.0 performance page": "docs.nvidia.com/nim/benchmarking (NIM 1.8.0 performance "
                                  "page)",
    "TensorRT-LLM performance overview": "github.com/NVIDIA/TensorRT-LLM",
    "Azure AI benchmarking guide": "Azure AI benchmarking guide (ND H100 v5, ND MI300X v5)",
    "GPUStack performance lab": "github.com/gpustack/gpustack",
    "Tenstorrent GPU reference": "github.com/tenstorrent/tt-inference-server",
    "NVIDIA DLI course data": "github.com/wbing520/ai-performance-engineering",
}


def test_the_per_source_table_is_the_records() -> None:
    rows = _table_after("Per source (leave-one-source-out")
    by_source = LOSO["by_source"]
    seen = set()
    for row in rows:
        (key,) = [v for k, v in SOURCES.items() if row[0].startswith(k)]
        seen.add(key)
        for cls, text in zip(CLASSES, row[1:], strict=True):
            want = by_source[key].get(cls)
            assert (_pct(text) == _one_decimal(want) if want is not None
                    else text == "—"), (row[0], cls, text)
    assert seen == set(by_source)


def test_every_tables_row_is_its_bound_and_its_folds_record() -> None:
    """"Every table": the shipped factors' medians rounded up to the next percent (the
    bounds ``test_preset_measurements`` holds each table to) and the fold's medians
    rounded; the bounds are no looser than the record's in-sample medians allow."""
    from tests.sim.test_preset_measurements import BOUNDS

    rows = _table_after("| table | preset(s) | role |")
    names = [r[0].strip("`") for r in rows]
    assert names == sorted(BOUNDS)
    for row in rows:
        name = row[0].strip("`")
        for cls, text in zip(CLASSES, row[3:7], strict=True):
            want = BOUNDS[name].get(cls)
            assert (_pct(text) == f"{want:.0%}".rstrip("%") if want is not None
                    else text == "—"), (name, cls, text)
        held = [None if c == "—" else _pct(c) for c in row[7].split(" / ")]
        stated = LOSO["by_table"][name]
        for cls, got in zip(CLASSES, held, strict=True):
            want = stated.get(cls)
            assert (got == f"{want:.0%}".rstrip("%") if want is not None else got is None), (
                name, cls, got, want)

