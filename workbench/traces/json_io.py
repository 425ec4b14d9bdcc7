"""The JSON helpers every JSON trace reader shares: lines, documents, typed fields.

A number spelled as a string is a wrong type here; the range rules are ``_io``'s
(docs/trace-bounds.md). Files are opened as every reader opens them (``_io``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import TraceFormatError
from workbench.plurals import noun
from workbench.records import Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import as_float, as_int, open_trace, read_text

log = logging.getLogger(__name__)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_exact(path: Path, lineno: int, raw: str) -> Any:
    """One line parsed by the stdlib, which keeps integers wider than 64 bits exact
    (orjson turns them into floats)."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(path, lineno, f"invalid JSON ({exc})") from None


def json_lines(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any], str]]:
    """``(line_number, object, raw_line)`` for every non-blank line (each a JSON object),
    split on ``\n`` only (``splitlines`` also splits on U+2028, U+0085 ..., which JSON
    strings may hold raw)."""
    return text_json_lines(path, read_text(path), fmt=fmt)


def text_json_lines(path: Path, text: str, what: str = "a JSON object", *, fmt: str
                    ) -> Iterator[tuple[int, dict[str, Any], str]]:  # fmt: skip
    """``json_lines`` over ``text`` already read from ``path`` (``what``: each line's
    name in the error when it is not an object; ``fmt``: the format, named when the file
    is one JSON document, ``document_rule``)."""
    first = True
    for lineno, raw in enumerate(_lines(text), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            rule = document_rule(text, fmt) if first else None
            raise TraceFormatError(path, lineno, rule or f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            rule = document_rule(text, fmt) if first else None
            raise TraceFormatError(path, lineno, rule or f"each line must be {what}")
        first = False
        yield lineno, obj, raw


def _lines(text: str) -> Iterator[str]:
    """``text.split("\\n")`` one line at a time (a list of them all doubles a file's memory)."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def document_rule(text: str, reader: str) -> str | None:
    """Why ``text`` (a file, or its head) is one JSON document and not JSON lines: an array
    (on one line or several) or an object written over several lines; None when it starts
    as neither. ``reader`` names who takes JSON lines (docs/trace-formats.md)."""
    head = text.lstrip()
    if head.startswith("["):
        what, jq = "one JSON array", "'.[]'"
    elif head.startswith("{") and head.split("\n", 1)[0].strip() == "{":
        what, jq = "one JSON object written over several lines", "."
    else:
        return None
    return (f"the file is {what}, not JSON lines: {reader} takes one JSON object a line "
            f"(convert: jq -c {jq} FILE)")


#: what a scan over a valid JSON text has to see to find an array's elements: an array
#: of numbers whole (hash ids: its commas are not the top level's), a whole string (so
#: brackets and commas inside it are skipped), a bracket, a brace, a comma
_JSON_SKELETON = re.compile(r'\[[^][{}"]*\]|"[^"\\]*(?:\\.[^"\\]*)*"|[][{},]')
_NOT_SPACE = re.compile(r"\S")


def array_element_lines(text: str, upto: int) -> list[int]:
    """The 1-based lines where elements 0..``upto`` of the top-level JSON array ``text``
    start (fewer when it has fewer). ``text`` must have parsed: one regex pass over its
    strings and brackets, no second parse, stopped at element ``upto``
    (docs/trace-formats.md, "JSON lines")."""
    opened = text.find("[")
    lines: list[int] = []
    at, line = 0, 1
    start = _NOT_SPACE.search(text, opened + 1)
    depth = 1
    for m in _JSON_SKELETON.finditer(text, opened + 1):
        if start is not None:  # an element starts here, unless the array ends
            if text[start.start()] == "]" or len(lines) > upto:
                break
            line += text.count("\n", at, start.start())
            at = start.start()
            lines.append(line)
            start = None
        c = m.group()
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 1:
            start = _NOT_SPACE.search(text, m.end())
    return lines[: upto + 1]


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None when it is not one (sniffers must never raise)."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def first_json_object(lines: list[str]) -> dict[str, Any] | None:
    """The first sniffed line as a JSON object, or None (sniffers must never raise)."""
    return json_object(lines[0]) if lines else None


def _json_typed(path: Path, line: int, name: str, value: Any, kind: str) -> Any:
    """``value``, a JSON number: a string or a null is a wrong type here."""
    if isinstance(value, str) or value is None:
        raise TraceFormatError(path, line, f"{name} must be {kind}, got {bounds.shown(value)}")
    return value


def json_int(path: Path, line: int, name: str, value: Any, *, minimum: int | None = 0,
             maximum: int | None = None) -> int:
    """An integer written as a JSON number (``as_int`` of what is not a string)."""
    value = _json_typed(path, line, name, value, "an integer")
    return as_int(path, line, name, value, minimum=minimum, maximum=maximum)


def json_number(path: Path, line: int, name: str, value: Any, *,
                minimum: float | None = 0.0, maximum: float | None = None,
                unit: str = "ms") -> float:
    """A finite number written as a JSON number (``as_float`` of what is not a string)."""
    value = _json_typed(path, line, name, value, "a number")
    return as_float(path, line, name, value, minimum=minimum, maximum=maximum, unit=unit)


def json_tokens(path: Path, line: int, name: str, value: Any, *, minimum: int = 0) -> int:
    """A token count written as a JSON integer, in ``[minimum, bounds.MAX_ROUND_TOKENS]``."""
    return json_int(path, line, name, value, minimum=minimum, maximum=bounds.MAX_ROUND_TOKENS)


def json_id(path: Path, line: int, name: str, value: Any) -> str:
    """An identifier: a non-empty string or an integer, returned as a string."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TraceFormatError(path, line, f"{name} must be a string or integer, "
                                           f"got {bounds.shown(value)}")
    text = str(value)
    if not text.strip():
        raise TraceFormatError(path, line, f"{name} must not be empty")
    return bounds.check_id(path, line, name, text)


def json_hash_ids(path: Path, line: int, value: Any, raw: str) -> tuple[int, ...]:
    """A ``hash_ids`` list of non-negative integers, exact however wide (``loads_exact``)."""
    if not isinstance(value, list):
        raise TraceFormatError(path, line, f"hash_ids must be a list, got {value!r:.40}")
    if not set(map(type, value)) <= {int}:  # C-speed; bool is not int here
        value = loads_exact(path, line, raw).get("hash_ids")  # ids wider than 64 bits
        if not isinstance(value, list) or not set(map(type, value)) <= {int}:
            raise TraceFormatError(path, line, "hash_ids must be a list of integers")
    if value and min(value) < 0:
        raise TraceFormatError(path, line, "hash_ids must be non-negative")
    return tuple(value)


def read_json_document(path: Path, what: str, kind: type) -> Any:
    """A whole-file JSON value of type ``kind``, opened as a trace is; ``what`` names the
    file in errors (line 0)."""
    try:
        value = orjson.loads(open_trace(path))
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(path, 0, f"cannot read {what} ({exc})") from None
    if not isinstance(value, kind):
        raise TraceFormatError(path, 0, f"{what} must be a JSON {kind.__name__}")
    return value


def note_unknown(
    path: Path,
    line: int,
    obj: Mapping[str, Any],
    known: AbstractSet[str],
    seen: dict[str, int],
    *,
    where: str = "",
    refused: Mapping[str, str] | None = None,
    mark: int | None = None,
) -> None:
    """The one rule for unknown fields (docs/trace-formats.md): each key of ``obj`` not in
    ``known`` goes into ``seen`` as ``where`` + key with its first line (``mark`` instead
    when given: a record's index, its line found later), for ``warn_unknown``; a key of
    ``refused`` is a ``TraceFormatError`` saying why."""
    for key in obj.keys() - known:
        if refused and key in refused:
            raise TraceFormatError(path, line, f"field {where}{key!r}: {refused[key]}")
        seen.setdefault(f"{where}{key}", line if mark is None else mark)


def warn_unknown(path: Path, seen: dict[str, int], meta: dict[str, Any]) -> None:
    """One warning naming every unknown field (``seen``: field → its first line), also
    kept in ``meta["unknown_fields"]``: never silently ignored."""
    if seen:
        meta["unknown_fields"] = sorted(seen)
        log.warning("%s: unknown %s ignored: %s", path, noun(len(seen), "field"),
                    ", ".join(f"{k} (line {seen[k]})" for k in sorted(seen)))


def unit_per_line(path: Path, fmt: str, unit_of: Callable[[Path, int, dict[str, Any]], Unit],
                  id_name: str) -> Workload:
    """A JSONL file of one unit a line (``unit_of(path, line, obj)``), every unit arriving
    at 0; a unit id seen twice names its line and ``id_name`` (abench, trajectory)."""
    units: list[Unit] = []
    seen: dict[str, int] = {}  # each unit id's line
    for line, obj, _raw in json_lines(path, fmt):
        unit = unit_of(path, line, obj)
        if unit.unit_id in seen:
            raise bounds.duplicate(path, line, id_name, unit.unit_id, seen[unit.unit_id])
        seen[unit.unit_id] = line
        units.append(unit)
    return Workload(tuple(units), fmt, str(path))
