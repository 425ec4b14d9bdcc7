"""Azure LLM inference traces (Azure/AzurePublicDataset, 2023 and 2024): CSV
``TIMESTAMP,ContextTokens,GeneratedTokens``, one independent request a row, arrivals read
from wall-clock timestamps to the nanosecond and rebased to the first request
(docs/trace-formats.md, "azure").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Workload
from workbench.traces import bounds
from workbench.traces._io import (
    check_columns,
    header_sniffer,
    read_csv,
    stream_csv,
    token_count,
)
from workbench.traces.formats import register_format
from workbench.traces.graph import WINDOW_RULE
from workbench.traces.shared import Request, note_rows, request_workload

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: a column of another Azure trace that changes what a row is: refused, with why
_FOREIGN = {"NumImages": "the 2025 multimodal trace's images are not text tokens: "
                         "workbench replays text prompts only"}
#: ``2023-11-16 18:15:46.6805900`` (2023) or ``2024-05-12 00:00:00.001163+00:00`` (2024);
#: up to 9 fractional digits, read exactly (``datetime`` keeps 6)
_STAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?")
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_NS = 1_000_000_000
SHAPE = "a date and time like 2023-11-16 18:15:46.6805900 (optionally +00:00)"


def _stamp_ns(path: Path, line: int, text: str) -> tuple[int, bool]:
    """``TIMESTAMP`` as integer ns since 1970-01-01 (UTC when the value has an offset, the
    clock as written when not) and whether it had an offset."""
    m = _STAMP.fullmatch(text.strip())
    if m is None:
        raise TraceFormatError(path, line, f"TIMESTAMP must be {SHAPE}, got {bounds.shown(text)}")
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    try:
        day = date(y, mo, d).toordinal() - _EPOCH_DAY
    except ValueError as exc:
        raise TraceFormatError(path, line, f"TIMESTAMP {bounds.shown(text)} is not a date "
                                           f"({exc})") from None
    if h > 23 or mi > 59 or s > 59:
        raise TraceFormatError(path, line, f"TIMESTAMP {bounds.shown(text)} is not a time "
                                           "of day (00:00:00 to 23:59:59)")
    frac = (m.group(7) or "").ljust(9, "0")
    ns = ((day * 86400 + h * 3600 + mi * 60 + s) * _NS) + int(frac or 0)
    zone = m.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        if hours > 23 or minutes > 59:
            raise TraceFormatError(path, line, f"TIMESTAMP {bounds.shown(text)} has no valid "
                                               "UTC offset")
        ns -= sign * (hours * 3600 + minutes * 60) * _NS
    return ns, zone is not None


def _zero(text: str) -> bool:
    """Whether a ContextTokens value before a window is 0 (an empty prompt, no request)."""
    try:
        return float(text) == 0
    except ValueError:
        return False  # refused when read; before a window it is counted, not checked


@register_format(
    "azure",
    sniff=header_sniffer(COLUMNS),
    description="Azure LLM inference trace CSV (2023, 2024): TIMESTAMP,ContextTokens,"
    "GeneratedTokens",
)
def read_azure(path: Path, window: tuple[int, int | None] | None = None) -> Workload:
    """Load an Azure LLM inference trace: one independent request a row, in file order,
    arriving at its TIMESTAMP less the earliest one. ``window=(offset, count)``: only those
    units, the file read as a stream up to the window's end and not held (the 2024 week
    files are past the bounds of a whole read: docs/trace-bounds.md, "A window of a large
    file"); arrivals are rebased to the earliest of the first request and the window's."""
    path = Path(path)
    if window is None:
        header, header_line, rows = read_csv(path, COLUMNS, "azure")
        fields: Iterator[tuple[int, list[str]]] = (
            (line, [row[c] for c in COLUMNS]) for line, row in rows)
    else:
        header, header_line, fields = stream_csv(path, COLUMNS, "azure")
        at = [header.index(c) for c in COLUMNS]
        if at != [0, 1, 2]:
            fields = ((line, [f[i] for i in at]) for line, f in fields)
    check_columns(path, header_line, header, COLUMNS, f"exactly {','.join(COLUMNS)}", _FOREIGN)
    skip, take = window or (0, None)
    most = bounds.MAX_TRACE_LINES - 1  # what a window may hold: a whole read's rows
    stamps: list[int] = []
    texts: list[str] = []
    kept: list[tuple[int, int, int, int]] = []  # line, row, prompt, output
    zoned: tuple[bool, int] | None = None  # the first row's: with an offset or not, its line
    first: tuple[int, str] | None = None  # the file's first request: ns, TIMESTAMP
    empty: list[int] = []
    clamped: list[int] = []
    units = 0  # requests seen, those before the window too
    ended = True  # the file was read to its end
    for n, (line, (stamp, context, generated)) in enumerate(fields):
        if units < skip and first is not None:
            # before the window: counted (a request or an empty prompt), not checked
            units += not _zero(context)
            continue
        if take is not None and units >= skip + take:
            ended = False
            break  # the rest of the file is not read
        ns, has_zone = _stamp_ns(path, line, stamp)
        if zoned is None:
            zoned = (has_zone, line)
        elif has_zone != zoned[0]:
            rule = (f"TIMESTAMP {bounds.shown(stamp.strip())} "
                    f"{'has a' if has_zone else 'has no'} UTC offset, but line {zoned[1]}'s "
                    f"{'has none' if has_zone else 'has one'}: a file mixes clocks")
            raise TraceFormatError(path, line, rule)
        prompt = token_count(path, line, "ContextTokens", context)
        out = token_count(path, line, "GeneratedTokens", generated)
        bounds.check_round(path, line, prompt, out)
        if prompt == 0:
            if units >= skip:
                empty.append(line)
            continue
        if first is None:
            first = (ns, stamp.strip())
        units += 1
        if units <= skip:
            continue
        if len(kept) == most:
            raise TraceFormatError(path, line, (
                f"a window of more than {most:,} units: past the bound of a trace "
                f"({bounds.DOC}); give trace.max_items (--max-items) {most:,} or fewer"))
        if out == 0:
            clamped.append(line)
            out = 1
        stamps.append(ns)
        texts.append(stamp.strip())
        kept.append((line, n, prompt, out))
    if window is not None and skip and skip >= units:
        raise ConfigError(f"trace.offset {skip} is past the trace's {units} units ({path})")
    if not kept:
        raise TraceFormatError(path, header_line + 1, "no row to replay: every row has "
                                                      "ContextTokens 0 (an empty prompt)")
    origin = min(stamps)
    origin_text = texts[stamps.index(origin)]
    if first is not None and first[0] < origin:  # a window's rows come after the first's
        origin, origin_text = first
    requests = [Request(line, n, (ns - origin) / 1e6, prompt, out, {})
                for (line, n, prompt, out), ns in zip(kept, stamps, strict=True)]
    meta: dict[str, Any] = {
        "arrival_origin_ms": origin / 1e6,
        "arrival_origin": origin_text,
        "timestamp_offset": bool(zoned and zoned[0]),
    }
    if window is not None:
        meta["window"] = {"offset": skip, "count": len(kept), "requested": take,
                          "units_in_file": units if ended else None, "rule": WINDOW_RULE,
                          "read": "stream"}
    note_rows(path, meta, "clamped_output_tokens", clamped, "GeneratedTokens 0",
              "each replayed as 1 output token (an output of 0 cannot be replayed)")
    return request_workload(path, "azure", requests, meta, time_column="TIMESTAMP",
                            prompt_column="ContextTokens", empty=empty)
