"""The frozen parity spec: one file says everything a parity campaign runs (docs/parity.md,
"The spec"). ``load_spec`` checks every field before anything runs; an error names the
file, the line, the field and the rule (``ConfigError``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.plurals import noun
from workbench.traces.load import file_sha256

SPEC_VERSION = 1
WINDOW_RULE = "contiguous"
WINDOW_RULE_TEXT = ("contiguous: units offset .. offset + max_items - 1 of the trace in file "
                    "order (workbench.traces.graph.window), nothing skipped or reordered")
RUNS = 2  # runs per side, each in its own process
MAX_ROWS = 32
MAX_WINDOW = 1_000_000
MAX_TIMEOUT_S = 24 * 3600
ROW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./~^@{}-]{0,199}$")
# every row states these: the topology and the capacities (module doc)
ROW_ENGINE_REQUIRED = ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens")
TOPOLOGY_KEYS = ("workers", "router", "dp", "dp_placement", "tp", "disagg", "router_options")
TOPOLOGY_REQUIRED = ("workers", "router", "dp", "tp")
PRESSURE_DEFAULT = (1, 3)  # preemptions per row: the exercised range (docs/parity.md)


@dataclass(frozen=True)
class Row:
    """One configuration: engine knobs (capacities) and topology, as ``target.engine``."""

    name: str
    engine: dict[str, Any]
    topology: dict[str, Any]
    preemptions: tuple[int, int] = PRESSURE_DEFAULT

    def knobs(self) -> dict[str, Any]:
        """The ``target.engine`` knobs of this row (topology folded in; ``tp`` is the
        preset's, so it is not a knob of its own)."""
        topo = {k: v for k, v in self.topology.items() if k != "tp" and v is not None}
        if topo.get("dp") == 1:  # one rank per worker: the engine as it always was
            topo.pop("dp")
            topo.pop("dp_placement", None)
        if topo.get("workers") == 1 and set(topo) <= {"workers", "router", "router_options"}:
            topo = {}  # one worker, one rank: one engine, no cluster (its router has no choice)
        return {**self.engine, **topo}


@dataclass(frozen=True)
class Side:
    """A baseline or candidate: a git revision of this project, or engine knobs applied
    to every row on this tree (``engine``)."""

    label: str
    revision: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "revision" if self.revision is not None else "engine"


@dataclass(frozen=True)
class ParitySpec:
    path: str
    name: str
    trace_path: str
    trace_sha256: str
    offset: int
    max_items: int
    arrival: dict[str, Any]
    rows: tuple[Row, ...]
    baseline: Side
    candidate: Side
    timeout_s: float = 1800.0
    memory_mb: int = 6144

    def run_config(self, row: Row, side: Side) -> dict[str, Any]:
        """The run config a child process replays (``workbench.simulate``)."""
        return {
            "trace": {"path": self.trace_path, "offset": self.offset,
                      "max_items": self.max_items},
            "arrival": dict(self.arrival),
            "target": {"engine": {**row.knobs(), **side.engine}},
        }  # fmt: skip

    def window(self) -> dict[str, Any]:
        return {"offset": self.offset, "max_items": self.max_items, "rule": WINDOW_RULE,
                "rule_text": WINDOW_RULE_TEXT}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "spec_path": self.path,
            "trace": {"path": self.trace_path, "sha256": self.trace_sha256},
            "window": self.window(), "arrival": self.arrival,
            "rows": [{"name": r.name, "engine": r.engine, "topology": r.topology,
                      "preemptions": list(r.preemptions)} for r in self.rows],
            "baseline": _side_dict(self.baseline), "candidate": _side_dict(self.candidate),
            "limits": {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb},
        }  # fmt: skip


def _side_dict(side: Side) -> dict[str, Any]:
    return {"label": side.label, "kind": side.kind, "revision": side.revision,
            "engine": side.engine}  # fmt: skip


class _Check:
    """Field errors named ``file:line: field: rule`` (the line where the file has it, or
    its nearest enclosing field; none for a spec given as data)."""

    def __init__(self, path: str, lines: dict[tuple[str | int, ...], int] | None = None) -> None:
        self.path = path
        self.lines = lines or {}

    def fail(self, where: str, rule: str) -> ConfigError:
        at = self.path
        if self.lines:
            # "rows[0] (single).engine.num_blocks" -> ("rows", 0, "engine", "num_blocks")
            bare = re.sub(r" \([^)]*\)| with .*$", "", where)
            key: tuple[str | int, ...] = tuple(
                int(t) if t.isdigit() else t for t in re.findall(r"[^.\[\]]+", bare)
                if t != "spec")
            while key and key not in self.lines:
                key = key[:-1]
            at = f"{self.path}:{self.lines.get(key, 1)}"
        return ConfigError(f"{at}: {where}: {rule}")

    def mapping(self, value: Any, where: str, keys: tuple[str, ...],
                required: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise self.fail(where, f"unknown {noun(len(unknown), 'key')} {unknown}; "
                            f"valid: {sorted(keys)}")
        for k in required:
            if k not in value:
                raise self.fail(f"{where}.{k}", "required (a frozen spec states it)")
        return dict(value)

    def integer(self, value: Any, where: str, lo: int, hi: int) -> int:
        if type(value) is not int or not lo <= value <= hi:
            raise self.fail(where, f"expected an integer in [{lo}, {hi}], got {value!r}")
        return value

    def string(self, value: Any, where: str, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str) or not value or (pattern and not pattern.match(value)):
            rule = f"matching {pattern.pattern}" if pattern else "non-empty"
            raise self.fail(where, f"expected a {rule} string, got {value!r}")
        return value


def load_spec(path: str | Path, *, verify_trace: bool = True) -> ParitySpec:
    """Read and check a spec file (module doc); the trace's sha256 is verified."""
    return read_spec(path, verify_trace=verify_trace)[0]


def read_spec(path: str | Path, *, verify_trace: bool = True) -> tuple[ParitySpec, Any]:
    """The checked spec and the data it was read from, once, by the bounded config reader
    (``validation.read_config_file``); ``parity --write`` changes that data."""
    from workbench.config.validation import read_config_file

    p = Path(path)
    data, text = read_config_file(p, "parity spec")
    spec = parse_spec(data, str(p), base=p.parent, verify_trace=verify_trace,
                      lines=field_lines(text))
    return spec, data


def field_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """Each field's line in a YAML or JSON text (JSON is YAML), by path: composed only
    (nothing built), after the bounded load has accepted the text."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[tuple[str | int, ...], int] = {}
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node is None:
            continue
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                sub = (*path, str(k.value))
                out[sub] = k.start_mark.line + 1
                stack.append((v, sub))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, (*path, i)) for i, v in enumerate(node.value))
    return out


def parse_spec(data: Any, path: str = "<spec>", *, base: Path | None = None,
               verify_trace: bool = True,
               lines: dict[tuple[str | int, ...], int] | None = None) -> ParitySpec:  # fmt: skip
    c = _Check(path, lines)
    top = c.mapping(data, "spec", ("parity", "name", "trace", "window", "arrival", "rows",
                                   "baseline", "candidate", "limits"),
                    ("parity", "name", "trace", "window", "rows", "baseline", "candidate"))
    if top["parity"] != SPEC_VERSION:
        raise c.fail("parity", f"the spec version; must be {SPEC_VERSION}, got {top['parity']!r}")
    name = c.string(top["name"], "name", ROW_NAME)
    trace = c.mapping(top["trace"], "trace", ("path", "sha256"), ("path", "sha256"))
    tpath = Path(c.string(trace["path"], "trace.path"))
    if not tpath.is_absolute() and base is not None:
        tpath = base / tpath
    tpath = tpath.resolve()  # the children run elsewhere: they get the absolute path
    sha = c.string(trace["sha256"], "trace.sha256", re.compile(r"^[0-9a-f]{64}$"))
    if verify_trace:
        if not tpath.is_file():
            raise c.fail("trace.path", f"{tpath} is not a file")
        got = file_sha256(tpath)
        if got != sha:
            raise c.fail("trace.sha256", f"the trace's content changed: {tpath} has sha256 "
                         f"{got}, the spec froze {sha}")
    win = c.mapping(top["window"], "window", ("offset", "max_items", "rule"),
                    ("offset", "max_items", "rule"))
    offset = c.integer(win["offset"], "window.offset", 0, 10**9)
    max_items = c.integer(win["max_items"], "window.max_items", 1, MAX_WINDOW)
    if win["rule"] != WINDOW_RULE:
        raise c.fail("window.rule", f"must be {WINDOW_RULE!r} ({WINDOW_RULE_TEXT}), "
                     f"got {win['rule']!r}")
    arrival = top.get("arrival") or {"mode": "trace-timed"}
    if not isinstance(arrival, Mapping):
        raise c.fail("arrival", "expected a mapping (the run config's arrival section)")
    if "max_items" in arrival:
        raise c.fail("arrival.max_items", "the window's max_items says how many units")
    rows_in = top["rows"]
    if not isinstance(rows_in, list) or not 1 <= len(rows_in) <= MAX_ROWS:
        raise c.fail("rows", f"expected a list of 1 to {MAX_ROWS} rows")
    rows = tuple(_row(c, r, i) for i, r in enumerate(rows_in))
    names = [r.name for r in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise c.fail("rows", f"row names must be unique; repeated: {dup}")
    baseline = _side(c, top["baseline"], "baseline")
    candidate = _side(c, top["candidate"], "candidate")
    if baseline.kind != candidate.kind:
        raise c.fail("candidate", "both sides are revisions, or both engine configurations")
    limits = c.mapping(top.get("limits") or {}, "limits", ("timeout_s", "memory_mb"))
    timeout = limits.get("timeout_s", 1800)
    if type(timeout) not in (int, float) or not 1 <= timeout <= MAX_TIMEOUT_S:
        raise c.fail("limits.timeout_s", f"seconds in [1, {MAX_TIMEOUT_S}], got {timeout!r}")
    memory = c.integer(limits.get("memory_mb", 6144), "limits.memory_mb", 256, 1 << 20)
    spec = ParitySpec(str(path), name, str(tpath), sha, offset, max_items, dict(arrival), rows,
                      baseline, candidate, float(timeout), memory)
    _check_configs(c, spec)
    return spec


def _row(c: _Check, value: Any, i: int) -> Row:
    where = f"rows[{i}]"
    row = c.mapping(value, where, ("name", "engine", "topology", "preemptions"),
                    ("name", "engine", "topology"))
    name = c.string(row["name"], f"{where}.name", ROW_NAME)
    where = f"rows[{i}] ({name})"
    engine = row["engine"]
    if not isinstance(engine, Mapping):
        raise c.fail(f"{where}.engine", "expected a mapping of engine knobs")
    for k in ROW_ENGINE_REQUIRED:
        if k not in engine:
            raise c.fail(f"{where}.engine.{k}", "required: a frozen row states its capacities")
    from workbench.sim.cluster import CLUSTER_KNOBS

    misplaced = sorted(set(engine) & set(CLUSTER_KNOBS))
    if misplaced:
        raise c.fail(f"{where}.engine", f"{misplaced} belong in topology")
    topo = c.mapping(row["topology"], f"{where}.topology", TOPOLOGY_KEYS, TOPOLOGY_REQUIRED)
    c.integer(topo["tp"], f"{where}.topology.tp", 1, 64)
    preset = str(engine.get("preset") or "")
    m = re.search(r"/tp(\d+)", preset)
    want = int(m.group(1)) if m else 1
    if topo["tp"] != want:
        rule = (f"the preset {preset!r} is tp{want}" if preset else
                "the polynomial cost model is one GPU: tp 1 (a preset MODEL/GPU/tpN sets TP)")
        raise c.fail(f"{where}.topology.tp", f"{rule}; got {topo['tp']}")
    lo_hi = row.get("preemptions", list(PRESSURE_DEFAULT))
    if (not isinstance(lo_hi, list) or len(lo_hi) != 2 or any(type(x) is not int for x in lo_hi)
            or not 0 <= lo_hi[0] <= lo_hi[1] <= 1000):
        raise c.fail(f"{where}.preemptions", f"[low, high] integers, 0 <= low <= high, got "
                     f"{lo_hi!r}")
    return Row(name, dict(engine), topo, (lo_hi[0], lo_hi[1]))


def _side(c: _Check, value: Any, where: str) -> Side:
    side = c.mapping(value, where, ("revision", "engine", "label"))
    if ("revision" in side) == ("engine" in side):
        raise c.fail(where, "give exactly one of revision (a git revision of this project) "
                     "or engine (knobs applied to every row)")
    label = c.string(side.get("label", where), f"{where}.label", ROW_NAME)
    if "revision" in side:
        return Side(label, revision=c.string(side["revision"], f"{where}.revision", REVISION))
    engine = side["engine"]
    if not isinstance(engine, Mapping):
        raise c.fail(f"{where}.engine", "expected a mapping of engine knobs")
    return Side(label, engine=dict(engine))


def _check_configs(c: _Check, spec: ParitySpec) -> None:
    """Every (row, side) run config through ``RunConfig``, on this tree."""
    from workbench.config import RunConfig

    sides = [spec.baseline, spec.candidate] if spec.baseline.kind == "engine" else [spec.baseline]
    for row in spec.rows:
        for side in sides:
            cfg = spec.run_config(row, side)
            try:
                RunConfig.from_dict(cfg)
            except ConfigError as exc:
                raise c.fail(f"rows ({row.name}) with {side.label}", str(exc)) from None
