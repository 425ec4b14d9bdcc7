"""Canonical ``session-execution-v2`` CSV: a materialized, replay-ready session trace.

What ``tracegen`` writes and a replay runs without a context policy: every
``prefix_len`` is a prefix that *will exist* when its round runs. Its header, rules
and sidecars (``<stem>.manifest.json``, ``<stem>.plan.json``, ``<stem>.graph.json``)
are in docs/trace-formats.md, "session-execution-v2"; each broken rule is one
``TraceFormatError`` with path and line. A large, plainly written file is checked
column-wise (``_fast_units``); every error comes from the strict row-by-row path.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench import safe_write as safe
from workbench.errors import TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import (
    FAST_PATH_MIN_ROWS,
    as_int,
    fast_frame,
    fast_ms,
    fast_rounds_fine,
    fast_strings,
    offset_ms,
    read_csv,
    read_text,
    token_count,
    wait_ms,
)
from workbench.traces.formats import register_format
from workbench.traces.graph import attach_sidecar
from workbench.traces.json_io import read_json_document
from workbench.traces.shared import request_id

FORMAT_NAME = "session-execution-v2"
HEADER = (
    "request_id",
    "session_id",
    "round_idx",
    "arrival_time_ms",
    "prefix_len",
    "input_len",
    "output_len",
    "tool_wait_after_ms",
)
HEADER_LINE = ",".join(HEADER)
MS_DECIMALS = 6
_MS_RE = re.compile(r"[+-]?[0-9]+\.[0-9]{6}")
_MS_PLAIN = re.compile(r"[0-9]+\.[0-9]{6}")  # what the fast path accepts without a second look
CanonicalRow = tuple[str, str, int, float, int, int, int, float]
"""One canonical row in ``HEADER`` order: request_id, session_id, round_idx,
arrival_time_ms, prefix_len, input_len, output_len, tool_wait_after_ms."""
_KINDS = ("str", "str", "int", "str", "int", "int", "int", "str")
_NEEDS_QUOTES = re.compile(r'[",\r\n]')


def graph_sidecar_path(path: str | Path) -> Path:
    """``<stem>.graph.json``: a session graph's links (docs/session-graphs.md), written by
    ``tracegen`` only when the source has sub-agents; a consumer that ignores it replays
    every session as a root."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix.lower() == ".csv" else path
    return stem.with_name(stem.name + ".graph.json")


def sidecar_paths(path: str | Path) -> tuple[Path, Path]:
    """``(<stem>.manifest.json, <stem>.plan.json)`` beside a canonical CSV."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix.lower() == ".csv" else path
    return stem.with_name(stem.name + ".manifest.json"), stem.with_name(stem.name + ".plan.json")


def sniff(lines: list[str]) -> bool:
    """Only the exact canonical header (a leading BOM tolerated)."""
    return bool(lines) and lines[0].lstrip("\ufeff").strip() == HEADER_LINE


@dataclass
class _State:
    """What the row checks need to remember while walking the file."""

    request_ids: dict[str, int] = field(default_factory=dict)  # each id's line
    session_lines: dict[str, int] = field(default_factory=dict)
    session: str | None = None
    next_idx: int = 0
    arrival: float = 0.0
    blocks: list[tuple[str, float, list[Round]]] = field(default_factory=list)


@register_format(
    FORMAT_NAME,
    sniff=sniff,
    description="canonical materialized session CSV (tracegen output)",
    aliases=("canonical",),
)
def read_session_execution_v2(path: Path, *, sidecars: bool = True) -> Workload:
    """Read and fully validate a canonical CSV (and, unless ``sidecars=False``, its sidecars)."""
    path = Path(path)
    text = read_text(path)
    units = _fast_units(text) if text.count("\n") >= FAST_PATH_MIN_ROWS else None
    if units is None:
        units = _strict_units(path)
    meta: dict[str, Any] = {"needs_context_policy": False}
    if sidecars:
        meta.update(_read_sidecars(path))
        graph = graph_sidecar_path(path)
        if graph.exists():
            rows = read_json_document(graph, "graph sidecar", list)
            units = attach_sidecar(graph, units, rows)
            meta["graph_path"] = str(graph)
    return Workload(units, FORMAT_NAME, source=str(path), meta=meta)


def _strict_units(path: Path) -> tuple[Unit, ...]:
    """Row by row, every rule in file order; the first broken one raises."""
    header, header_line, rows = read_csv(path, HEADER, FORMAT_NAME)
    if tuple(header) != HEADER:
        raise TraceFormatError(path, header_line, f"header must be exactly {HEADER_LINE!r}")
    state = _State()
    for line, row in rows:
        _take_row(path, line, row, state)
    return tuple(
        Unit(sid, "session", arrival, tuple(rounds)) for sid, arrival, rounds in state.blocks
    )


def _ms(path: Path, line: int, name: str, text: str) -> float:
    read = offset_ms if name == "arrival_time_ms" else wait_ms
    value = read(path, line, name, text)
    if not _MS_RE.fullmatch(text):
        raise TraceFormatError(
            path, line, f"{name} must be written with exactly {MS_DECIMALS} decimals, "
                        f"got {bounds.shown(text)}"
        )
    return value


def _take_row(path: Path, line: int, row: dict[str, str], state: _State) -> None:
    """Check one row against every rule of the format and append it to its session."""
    sid = row["session_id"]
    if not sid:
        raise TraceFormatError(path, line, "session_id must not be empty")
    bounds.check_id(path, line, "session_id", sid)
    idx = as_int(path, line, "round_idx", row["round_idx"])
    arrival = _ms(path, line, "arrival_time_ms", row["arrival_time_ms"])
    prefix = token_count(path, line, "prefix_len", row["prefix_len"])
    inp = token_count(path, line, "input_len", row["input_len"])
    out = token_count(path, line, "output_len", row["output_len"], minimum=1)
    wait = _ms(path, line, "tool_wait_after_ms", row["tool_wait_after_ms"])
    rid = row["request_id"]
    if rid != request_id(sid, idx):
        raise TraceFormatError(
            path, line, f"request_id must be {request_id(sid, idx)!r}, got {bounds.shown(rid)}"
        )
    if rid in state.request_ids:
        raise bounds.duplicate(path, line, "request_id", rid, state.request_ids[rid])
    state.request_ids[rid] = line
    _check_order(path, line, sid, idx, arrival, state)
    if idx == 0 and prefix != 0:
        raise TraceFormatError(path, line, f"prefix_len must be 0 on round 0, got {prefix}")
    if prefix == 0 and inp == 0:
        raise TraceFormatError(path, line, "input_len must be > 0 when prefix_len is 0")
    bounds.check_round(path, line, prefix + inp, out)
    rounds = state.blocks[-1][2]
    if rounds:
        prev = rounds[-1]
        context = prev.prefix_len + prev.input_len + prev.output_len
        if prefix > context:
            raise TraceFormatError(
                path,
                line,
                f"prefix_len {prefix} is longer than the conversation so far ({context} = "
                f"prefix + input + output of round {prev.round_idx}): that prefix cannot exist",
            )
    rnd = Round(rid, sid, idx, arrival, prefix, inp, out, wait)
    rounds.append(rnd)


def _check_order(path: Path, line: int, sid: str, idx: int, arrival: float, state: _State) -> None:
    """Session contiguity, round numbering and arrival rules (open a block on a new session)."""
    if sid == state.session:
        if idx != state.next_idx:
            raise TraceFormatError(
                path, line, f"round_idx of session {sid!r} must be {state.next_idx}, got {idx}"
            )
        if arrival != state.arrival:
            raise TraceFormatError(
                path,
                line,
                f"arrival_time_ms must be the same on every row of session {sid!r} "
                f"({state.arrival:.6f}), got {arrival:.6f}",
            )
        state.next_idx += 1
        return
    if sid in state.session_lines:
        raise TraceFormatError(
            path,
            line,
            f"rows of session {sid!r} are not contiguous (its block ended before; "
            f"first row at line {state.session_lines[sid]})",
        )
    if idx != 0:
        raise TraceFormatError(
            path, line, f"round_idx of session {sid!r} must start at 0, got {idx}"
        )
    if state.session is None and arrival != 0.0:
        raise TraceFormatError(
            path, line, f"the first row must arrive at 0 (file rebased), got {arrival:.6f}"
        )
    if state.session is not None and arrival < state.arrival:
        raise TraceFormatError(
            path,
            line,
            f"session blocks must be in non-decreasing arrival: {arrival:.6f} "
            f"after {state.arrival:.6f}",
        )
    state.session_lines[sid] = line
    state.session, state.next_idx, state.arrival = sid, 1, arrival
    state.blocks.append((sid, arrival, []))


def _read_sidecars(path: Path) -> dict[str, Any]:
    """Manifest (object) and plan (array) beside the CSV, when present."""
    out: dict[str, Any] = {}
    manifest_path, plan_path = sidecar_paths(path)
    for key, side, kind in (("manifest", manifest_path, dict), ("plan", plan_path, list)):
        if not side.exists():
            continue
        out[key] = read_json_document(side, f"{key} sidecar", kind)
        out[f"{key}_path"] = str(side)
    return out


def _csv_field(text: str) -> str:
    if _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def rows_of(units: Iterable[Unit]) -> Iterator[CanonicalRow]:
    """Canonical rows of planned session units (round ``arrival_ms`` is ignored: the unit's)."""
    for unit in units:
        for r in unit.rounds:
            yield (r.request_id, unit.unit_id, r.round_idx, unit.arrival_ms, r.prefix_len,
                   r.input_len, r.output_len, r.tool_wait_after_ms)


def format_rows(rows: Iterable[CanonicalRow]) -> Iterator[str]:
    """CSV lines (with newline) for canonical rows, header first; ms with 6 decimals."""
    yield HEADER_LINE + "\n"
    quoted: dict[str, bool] = {}
    for rid, sid, idx, arrival, prefix, inp, out, wait in rows:
        needs = quoted.get(sid)
        if needs is None:
            needs = quoted[sid] = bool(_NEEDS_QUOTES.search(sid) or _NEEDS_QUOTES.search(rid))
        if needs:
            rid, sid = _csv_field(rid), _csv_field(sid)
        yield f"{rid},{sid},{idx},{arrival:.6f},{prefix},{inp},{out},{wait:.6f}\n"


def write_session_execution_v2(path: str | Path, rows: Iterable[CanonicalRow]) -> Path:
    """Write canonical rows (``HEADER`` order; ``rows_of`` of planned units) as a CSV,
    atomically; the caller guarantees the rules (``tracegen`` reads the file back)."""
    path = Path(path)
    with safe.open_file(path, "w", atomic=True) as fh:  # NAME.tmp, never through a link
        fh.writelines(format_rows(rows))
    return path



def _fast_units(text: str) -> tuple[Unit, ...] | None:
    """Column-wise check of every rule; ``None`` if any value or rule looks off."""
    frame = fast_frame(text, dict(zip(HEADER, _KINDS, strict=True)))
    if frame is None:
        return None
    arrival = fast_ms(frame, "arrival_time_ms", _MS_PLAIN)
    wait = fast_ms(frame, "tool_wait_after_ms", _MS_PLAIN)
    sids = fast_strings(frame, "session_id")
    idx, prefix, inp, out = (frame[c].to_numpy(dtype=np.int64) for c in HEADER[2:3] + HEADER[4:7])
    if not fast_rounds_fine(sids, prefix, inp, out, wait, arrival):
        return None
    assert wait is not None and arrival is not None  # fast_rounds_fine checked
    if (idx < 0).any() or ((idx == 0) & (prefix != 0)).any():
        return None
    # a round's prefix exists: at most the previous round's prompt + output (round 0: 0)
    context = np.concatenate(([0], (prefix + inp + out)[:-1]))
    if ((idx > 0) & (prefix > context)).any():
        return None
    starts = _block_starts(sids, idx, arrival)
    ids = fast_strings(frame, "request_id")
    if starts is None or ids != [request_id(s, i) for s, i in zip(sids, idx.tolist(), strict=True)]:
        return None
    if len(set(ids)) != len(ids):
        return None
    rows = list(
        zip(ids, sids, idx.tolist(), arrival.tolist(), prefix.tolist(), inp.tolist(),
            out.tolist(), wait.tolist(), strict=True)
    )
    bounds = [*starts.tolist(), len(rows)]
    return tuple(
        Unit(rows[a][1], "session", rows[a][3], tuple(Round(*r) for r in rows[a:b]))
        for a, b in itertools.pairwise(bounds)
    )


def _block_starts(sids: list[str], idx: np.ndarray, arrival: np.ndarray) -> np.ndarray | None:
    """Row index where each session block starts, if blocks, numbering and arrivals obey."""
    import pandas as pd

    codes = pd.factorize(np.asarray(sids, dtype=object))[0]
    change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.concatenate(([0], change))
    if len(starts) != codes.max() + 1:  # a session reappears after its block ended
        return None
    block = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(sids))))
    if not np.array_equal(idx, np.arange(len(sids)) - starts[block]):
        return None
    if arrival[0] != 0.0 or (arrival != arrival[starts][block]).any():
        return None
    return starts if bool((np.diff(arrival[starts]) >= 0).all()) else None
