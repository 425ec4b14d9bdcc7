"""Raw session CSV (``session``): recorded rounds as a trace reports them (TraceLab's export).

Columns, rules and the optional sub-agent columns: docs/trace-formats.md, "session", and
docs/session-graphs.md. Prefixes are kept *as reported* (a first round may claim one,
prefixes may shrink), so the workload needs a context policy before it runs
(``meta["needs_context_policy"]``); ``tracegen`` materializes one. A large, plainly
written file is checked column-wise first; every error comes from the strict
row-by-row path (path, line, rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import (
    FAST_PATH_MIN_ROWS,
    as_int,
    check_columns,
    fast_frame,
    fast_ms,
    fast_rounds_fine,
    fast_strings,
    header_names,
    offset_ms,
    read_csv,
    read_text,
    token_count,
    wait_ms,
)
from workbench.traces.formats import register_format
from workbench.traces.graph import CSV_COLUMNS, attach_spawns, csv_spawn
from workbench.traces.shared import request_id

FORMAT_NAME = "session"
REQUIRED = ("round_idx", "prefix_len", "input_len", "output_len", "tool_wait_after_ms")
ID_COLUMNS = ("session_id", "id")
OPTIONAL = ("arrival_time", *CSV_COLUMNS)
KNOWN = frozenset(REQUIRED + ID_COLUMNS + OPTIONAL)
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def sniff(lines: list[str]) -> bool:
    """A header naming the round columns and one session id column, nothing canonical."""
    if not lines:
        return False
    cols = header_names(lines[0])
    return set(REQUIRED) <= cols and bool(cols & set(ID_COLUMNS)) and "request_id" not in cols


@dataclass
class _Session:
    """One session being assembled: its arrival (and where it was first said) and rows."""

    first_line: int
    arrival: float
    rows: list[tuple[int, int, int, int, int, float]] = field(default_factory=list)


@register_format(FORMAT_NAME, sniff=sniff, description="raw session CSV (TraceLab export)")
def read_session_csv(path: Path) -> Workload:
    """Read a raw session CSV into session units; one ``TraceFormatError`` on a bad file."""
    path = Path(path)
    text = read_text(path)
    fast = _fast_units(text) if text.count("\n") >= FAST_PATH_MIN_ROWS else None
    units, id_col, has_arrival = fast or _strict_units(path)
    meta = {"needs_context_policy": True, "id_column": id_col, "has_arrival_time": has_arrival}
    return Workload(units, FORMAT_NAME, source=str(path), meta=meta)


def _strict_units(path: Path) -> tuple[tuple[Unit, ...], str, bool]:
    """Row by row, in file order; the first broken rule raises."""
    header, header_line, rows = read_csv(path, REQUIRED, FORMAT_NAME)
    id_col = _id_column(path, header, header_line)
    has_arrival = "arrival_time" in header
    sessions: dict[str, _Session] = {}
    spawns: dict[str, tuple[int, tuple[Any, ...]]] = {}
    graph = "parent_session_id" in header
    for line, row in rows:
        sid = row[id_col]
        bounds.check_id(path, line, id_col, sid)
        if not sid.strip():
            raise TraceFormatError(path, line, f"{id_col} must not be empty")
        parsed = _parse_round(path, line, row)
        arrival = offset_ms(path, line, "arrival_time", row["arrival_time"]) if has_arrival else 0.0
        sess = sessions.get(sid)
        spawn = csv_spawn(path, line, row) if graph else None
        if spawn is not None and sid not in spawns:
            if sess is not None:
                raise TraceFormatError(path, line, f"parent_session_id of session {sid!r} "
                                       f"must be on its first row (line {sess.first_line})")
            spawns[sid] = (line, spawn)
        elif spawn is not None and spawn != spawns[sid][1]:
            raise TraceFormatError(path, line, f"graph columns of session {sid!r} differ "
                                   f"from its first row's (line {spawns[sid][0]})")
        if sess is None:
            sess = sessions[sid] = _Session(line, arrival)
        elif arrival != sess.arrival:
            raise TraceFormatError(
                path,
                line,
                f"arrival_time must be the same on every row of session {sid!r} "
                f"({sess.arrival:g} at line {sess.first_line}), got {arrival:g}",
            )
        sess.rows.append(parsed)
    units = [_build_unit(path, sid, sess) for sid, sess in sessions.items()]
    return tuple(attach_spawns(units, spawns)), id_col, has_arrival


def _id_column(path: Path, header: list[str], line: int) -> str:
    present = [c for c in ID_COLUMNS if c in header]
    if not present:
        raise TraceFormatError(path, line, "missing column: session_id (or its alias id)")
    if len(present) == 2:
        raise TraceFormatError(path, line, "both session_id and its alias id given; keep one")
    check_columns(path, line, header, KNOWN, f"only {', '.join(sorted(KNOWN))}")
    return present[0]


def _parse_round(
    path: Path, line: int, row: dict[str, str]
) -> tuple[int, int, int, int, int, float]:
    """``(round_idx, line, prefix, input, output, tool_wait)`` of one row, types checked."""
    idx = as_int(path, line, "round_idx", row["round_idx"])
    prefix = token_count(path, line, "prefix_len", row["prefix_len"])
    inp = token_count(path, line, "input_len", row["input_len"])
    out = token_count(path, line, "output_len", row["output_len"], minimum=1)
    wait = wait_ms(path, line, "tool_wait_after_ms", row["tool_wait_after_ms"])
    if prefix + inp == 0:
        raise TraceFormatError(path, line, "prefix_len + input_len must be > 0 (empty prompt)")
    bounds.check_round(path, line, prefix + inp, out)
    return idx, line, prefix, inp, out, wait


def _build_unit(path: Path, sid: str, sess: _Session) -> Unit:
    """Order a session's rows by ``round_idx`` (stable) and demand exactly 0..n-1."""
    ordered = sorted(sess.rows, key=lambda r: (r[0], r[1]))
    rounds = []
    for expected, (idx, line, prefix, inp, out, wait) in enumerate(ordered):
        if idx != expected:
            if idx == expected - 1:
                first = ordered[expected - 1][1]
                rule = f"duplicate round_idx {idx} in session {sid!r} (also at line {first})"
            else:
                rule = (
                    f"round_idx of session {sid!r} must be contiguous from 0: "
                    f"expected {expected}, found {idx}"
                )
            raise TraceFormatError(path, line, rule)
        rounds.append(Round(request_id(sid, idx), sid, idx, sess.arrival, prefix, inp, out, wait))
    return Unit(sid, "session", sess.arrival, tuple(rounds))


def _fast_units(text: str) -> tuple[tuple[Unit, ...], str, bool] | None:
    """Column-wise check of every rule; ``None`` (strict path decides) if anything looks off."""
    header = text.split("\n", 1)[0].rstrip("\r").split(",")
    ids = [c for c in header if c in ID_COLUMNS]
    if len(ids) != 1 or set(header) - KNOWN or not set(REQUIRED) <= set(header):
        return None
    if set(header) & set(CSV_COLUMNS):  # a session graph: the strict path reads it
        return None
    text_cols = (*ID_COLUMNS, *OPTIONAL, "tool_wait_after_ms")
    kinds = {c: "str" if c in text_cols else "int" for c in header}
    frame = fast_frame(text, kinds) if len(set(header)) == len(header) else None
    if frame is None:
        return None
    sids = fast_strings(frame, ids[0])
    wait = fast_ms(frame, "tool_wait_after_ms", _PLAIN_NUMBER)
    has_arrival = "arrival_time" in header
    arrival = fast_ms(frame, "arrival_time", _PLAIN_NUMBER) if has_arrival else np.zeros(len(sids))
    cols = {c: frame[c].to_numpy(dtype=np.int64) for c in REQUIRED[:4]}
    if (cols["round_idx"] < 0).any() or not fast_rounds_fine(
            sids, cols["prefix_len"], cols["input_len"], cols["output_len"], wait, arrival):
        return None
    assert wait is not None and arrival is not None  # fast_rounds_fine checked
    cols["tool_wait_after_ms"], cols["arrival_time"] = wait, arrival
    units = _fast_build(sids, cols)
    return None if units is None else (units, ids[0], has_arrival)


def _fast_build(sids: list[str], cols: dict[str, np.ndarray]) -> tuple[Unit, ...] | None:
    """Group by session (first appearance), order by round_idx, demand 0..n-1 and one arrival."""
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(sids, dtype=object))
    n = len(sids)
    first = np.full(len(uniques), n)
    np.minimum.at(first, codes, np.arange(n))
    arrival = cols["arrival_time"]
    if (arrival != arrival[first][codes]).any():
        return None
    order = np.lexsort((np.arange(n), cols["round_idx"], codes))
    counts = np.bincount(codes)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    idx = cols["round_idx"][order]
    if not np.array_equal(idx, np.arange(n) - np.repeat(starts, counts)):
        return None
    idx_l, arr_l = idx.tolist(), arrival[order].tolist()
    p_l, i_l, o_l, w_l = (
        cols[c][order].tolist()
        for c in ("prefix_len", "input_len", "output_len", "tool_wait_after_ms")
    )
    units = []
    for sid, a, m in zip(uniques.tolist(), starts.tolist(), counts.tolist(), strict=True):
        rounds = tuple(
            Round(request_id(sid, idx_l[k]), sid, idx_l[k], arr_l[k], p_l[k], i_l[k], o_l[k],
                  w_l[k])
            for k in range(a, a + m)
        )
        units.append(Unit(sid, "session", arr_l[a], rounds))
    return tuple(units)
