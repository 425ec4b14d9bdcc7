"""The published measurement tables as files: ``workbench/data/measurements/*.tsv``.

Each table keeps its source as ``# key: value`` lines (source URL, section, engine and
version, kind, lengths, the preset standing for the deployment, notes on every
conversion) above a tab-separated header; docs/hardware.md lists them. Reading them
needs no engine: ``presets.stated`` asks which (model, GPU) pairs a table covers,
``presets.fit`` replays them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

TABLES_DIR = Path(__file__).resolve().parents[2] / "data" / "measurements"
#: tables kept outside the fit: never loaded by it, by its record or by the stated
#: errors (``load_tables()`` reads ``TABLES_DIR`` alone), replayed only by their own
#: test: issue 41's check on tables outside the project (docs/hardware.md, "Tables
#: outside the fit")
OUTSIDE_DIR = TABLES_DIR / "outside"
KINDS = ("closed_loop", "burst", "batch_latency")
REQUIRED = {"closed_loop": ("source", "kind", "preset"),
            "batch_latency": ("source", "kind", "isl", "osl", "batch"),
            "burst": ("source", "kind")}


@dataclass(frozen=True, slots=True)
class Table:
    """One published table: its metadata lines and rows (strings as read)."""

    name: str
    meta: dict[str, str]
    rows: list[dict[str, str]]

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def engine_knobs(self) -> dict[str, object]:
        """How the engine the table ran on schedules: the ``# scheduler:`` line's entry
        of ``presets.schedulers`` (e.g. ``trtllm``) and the ``# engine_config:`` line's
        ``knob=value`` pairs over it, applied over the preset's knobs when the table is
        replayed (ValueError naming the table and the pair it cannot read)."""
        out: dict[str, object] = {}
        if self.meta.get("scheduler"):  # the engine's scheduling (``presets.schedulers``)
            out["scheduler"] = self.meta["scheduler"]
        for pair in self.meta.get("engine_config", "").split():
            key, sep, text = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"{self.name}: '# engine_config:' expects knob=value pairs, "
                                 f"got {pair!r}")
            out[key] = _value(text)
        return out

    def _either(self, line: str, off: str, on: str) -> bool:
        """Whether the ``# LINE:`` line says ``on`` rather than ``off`` (the default);
        ValueError naming the table and the line otherwise."""
        value = self.meta.get(line, off).strip().lower()
        if value not in (off, on):
            raise ValueError(f"{self.name}: '# {line}:' must be {off} or {on}, got {value!r}")
        return value == on

    @property
    def unsplit_attention(self) -> bool:
        """Whether the engine the table ran on decoded with one thread block per
        (sequence, head) over the whole context: the ``# decode_attention:`` line,
        ``unsplit`` or ``split`` (the default) (docs/hardware.md, "Decode attention")."""
        return self._either("decode_attention", "split", "unsplit")

    @property
    def collapsed_routing(self) -> bool:
        """Whether the MoE the table measured routed every token of a step to the same
        experts: the ``# moe_routing:`` line, ``collapsed`` or ``independent`` (the
        default) (docs/hardware.md, "MoE routing": random gate weights of a fake-weight
        benchmark)."""
        return self._either("moe_routing", "independent", "collapsed")

    @property
    def static_loop(self) -> bool:
        """Whether the engine the table ran on stepped in a compiled static-batch loop
        (TensorRT-LLM's C++ benchmark) rather than a serving engine's scheduler: the
        ``# step_loop:`` line, ``static`` or ``serving`` (the default) (docs/hardware.md,
        "Fixed time by engine")."""
        return self._either("step_loop", "serving", "static")

    @property
    def test_run(self) -> bool:
        """Whether the benchmark client sent the first request's prompt once, alone,
        before the measured run, so that request found its prompt in the engine's prefix
        cache: the ``# test_run:`` line, ``first_prompt`` (``vllm bench serve`` and
        vLLM's ``benchmark_serving.py``) or ``none`` (the default) (docs/hardware.md,
        "What the benchmark client sent")."""
        return self._either("test_run", "none", "first_prompt")

    @property
    def perf_analyzer(self) -> bool:
        """Whether a closed-loop table was measured as GenAI-Perf's perf_analyzer
        measures: from the load's start, the requests that ended within its first three
        consecutive windows that each saw one end (``presets.bench.perf_analyzer_windows``):
        the ``# measurement:`` line, ``perf_analyzer`` or ``steady`` (the default: the
        replay's steady state) (docs/hardware.md, "What the benchmark client sent")."""
        return self._either("measurement", "steady", "perf_analyzer")

    @property
    def switches(self) -> dict[str, float]:
        """The ``presets.Factors`` switches the engine the table ran on sets (1.0 each):
        ``unsplit_attention`` (``# decode_attention: unsplit``), ``collapsed_routing``
        (``# moe_routing: collapsed``), ``static_loop`` (``# step_loop: static``)."""
        return {name: 1.0 for name, on in (("unsplit_attention", self.unsplit_attention),
                                           ("collapsed_routing", self.collapsed_routing),
                                           ("static_loop", self.static_loop))
                if on}

    def measured_requests(self, row: dict[str, str] | None = None) -> int | None:
        """Measured requests per closed-loop row, where the table says: the row's
        ``requests`` column (the requests the benchmark measured at that row), else the
        ``# requests:`` line (a single client's requests are alike in the simulated
        engine, so two measure what sixteen do); None: the replay's default."""
        text = (row or {}).get("requests") or ""
        where = "a row's 'requests'"
        if not text.strip():
            text, where = self.meta.get("requests", ""), "'# requests:'"
        text = text.strip()
        if not text:
            return None
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{self.name}: {where} must be a whole number >= 1, "
                             f"got {text!r}")
        return int(text)

    @property
    def source_group(self) -> str:
        """The source a leave-one-source-out check leaves out as a whole: the table's
        ``# source_group:`` line, else its source's repository (``github.com/OWNER/REPO``)
        or page (the URL without its query)."""
        if self.meta.get("source_group"):
            return self.meta["source_group"]
        url = self.meta["source"].split()[0].split("?")[0].split("#")[0]
        parts = url.split("/")
        if len(parts) > 4 and parts[2] == "github.com":
            return "/".join(parts[2:5])
        return url.removeprefix("https://").removeprefix("http://")

    @property
    def presets(self) -> list[str]:
        """The deployments (presets) the table measured, in row order."""
        if "preset" in self.meta:
            return [self.meta["preset"]]
        return list(dict.fromkeys(r["preset"] for r in self.rows))


def _value(text: str) -> object:
    """A knob value as written: true/false, an integer, a number, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_tables(folder: Path = TABLES_DIR) -> list[Table]:
    """Every ``*.tsv`` table of ``folder``, sorted by name (ValueError naming the file
    and the missing line or unknown kind)."""
    out = []
    for path in sorted(folder.glob("*.tsv")):
        meta: dict[str, str] = {}
        body: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                meta[key.strip()] = value.strip()
            elif line.strip():
                body.append(line)
        kind = meta.get("kind", "")
        if kind not in KINDS:
            raise ValueError(f"{path}: '# kind:' must be one of {KINDS}, got {kind!r}")
        for need in REQUIRED[kind]:
            if need not in meta:
                raise ValueError(f"{path}: missing '# {need}: ...' line")
        out.append(Table(path.stem, meta, list(csv.DictReader(body, delimiter="\t"))))
    return out
