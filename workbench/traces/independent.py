"""Independent-request CSV (``id,arrival_time,input_len,output_len``) → one-round units
that never share context, in file order (docs/trace-formats.md, "independent").
"""

from __future__ import annotations

import csv
from pathlib import Path

from workbench.errors import TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import check_columns, offset_ms, read_csv, token_count
from workbench.traces.formats import register_format

COLUMNS = ("id", "arrival_time", "input_len", "output_len")


def _unit(path: Path, line: int, row: dict[str, str]) -> Unit:
    rid = row["id"].strip()
    if not rid:
        raise TraceFormatError(path, line, "id must not be empty")
    bounds.check_id(path, line, "id", rid)
    arrival = offset_ms(path, line, "arrival_time", row["arrival_time"])
    inp = token_count(path, line, "input_len", row["input_len"], minimum=1)
    out = token_count(path, line, "output_len", row["output_len"], minimum=1)
    bounds.check_round(path, line, inp, out)
    request_id = f"independent_{rid}"
    rnd = Round(request_id, request_id, 0, arrival, 0, inp, out)
    return Unit(request_id, "independent", arrival, (rnd,))


def _sniff(lines: list[str]) -> bool:
    if not lines:
        return False
    try:
        header = next(csv.reader([lines[0]]))
    except (csv.Error, StopIteration):
        return False
    names = [h.strip() for h in header]
    return len(names) == len(COLUMNS) and set(names) == set(COLUMNS)


@register_format(
    "independent",
    sniff=_sniff,
    description="independent-request CSV: id,arrival_time,input_len,output_len",
)
def read_independent(path: Path) -> Workload:
    """Load an independent-request CSV: one unit per row, in file order."""
    path = Path(path)
    header, header_line, rows = read_csv(path, COLUMNS, "independent")
    check_columns(path, header_line, header, COLUMNS, f"exactly {','.join(COLUMNS)}")
    units: list[Unit] = []
    seen: dict[str, int] = {}  # each unit id's line
    for line, row in rows:
        unit = _unit(path, line, row)
        if unit.unit_id in seen:
            raise bounds.duplicate(path, line, "id", row["id"].strip(), seen[unit.unit_id])
        seen[unit.unit_id] = line
        units.append(unit)
    return Workload(tuple(units), "independent", str(path))
