"""The documented bounds every trace reader enforces, and the id rules (docs/trace-bounds.md).

Readers check each field where they parse it (``_io.token_count`` ..., ``check_round``);
``check_workload`` runs on every loaded workload as the last word (derived values,
unique ids), so what ``load_trace`` returns is always inside these bounds.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from workbench.errors import TraceFormatError
from workbench.records import MAX_ARRIVAL_MS as MAX_ARRIVAL_MS  # a unit's arrival offset: 366 days
from workbench.records import Round, Unit, UnitStream, Workload

# each bound and why it is what it is: docs/trace-bounds.md, "Bounds" and "Sendable ids"
MAX_ROUND_TOKENS = 10_000_000  # prompt + output of one round (and so each length)
MAX_WAIT_MS = 7 * 24 * 3600 * 1000.0  # any wait between two rounds: 7 days
MAX_EPOCH_MS = float(2**53)  # absolute Unix ms (Dynamo, TraceLab): exact in a float
#: Unix time told from its scale (docs/trace-bounds.md, "Unix time"): ms from 1e12 (2001-09-09),
#: seconds from 1e9 to 1e10 (2001-09-09 to 2286-11-20)
UNIX_MS_FROM = 1e12
UNIX_S_FROM, UNIX_S_TO = 1e9, 1e10
MAX_TRACE_BYTES = 1 << 30  # a trace file is read whole: 1 GiB
MAX_TRACE_LINES = 10_000_001  # a header and 10M rows (tracegen writes at most 10M rounds)
MAX_HEAD_BYTES = 16 << 20  # what format detection reads of a file's head
MAX_ID_CHARS = 256  # an id read from a trace
MAX_WIRE_ID_CHARS = 512  # a unit or request id as sent, derived ids included
#: what no HTTP header can carry: C0 controls, DEL, C1 controls, U+2028/9, lone surrogates
_UNSENDABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

DOC = "docs/trace-bounds.md"


SHOWN_CHARS = 80  # a value quoted in an error: at most this much of its repr


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut to ``SHOWN_CHARS`` with its length said (a
    300 KB field was printed whole, on one line of stderr)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "an integer of more than 4,300 digits"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS - 20]}... ({len(text):,} characters)"


def over(name: str, value: object, bound: float, unit: str) -> str:
    """The rule text of a value past its bound."""
    limit = f"{bound:,.0f}" if float(bound).is_integer() else f"{bound:,}"
    return f"{name} {shown(value)} exceeds the bound of {limit} {unit} ({DOC})"


def id_rule(name: str, value: str, limit: int = MAX_ID_CHARS) -> str | None:
    """Why ``value`` cannot be sent as an id (None: it can)."""
    if len(value) > limit:
        return (f"{name} is {len(value):,} characters long; ids are sent in HTTP headers "
                f"(x-request-id) and may be at most {limit} ({DOC})")
    bad = _UNSENDABLE.search(value)
    if bad is not None:
        what = "a lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
        return (f"{name} {value[:60]!r} holds {bad.group()!r}, {what}, which an HTTP header "
                f"cannot carry ({DOC})")
    return None


def duplicate(path: Path, line: int, name: str, value: str, first: int | str) -> TraceFormatError:
    """The one error for an id a trace uses twice (docs/trace-bounds.md, "Unique ids"):
    ``first`` is the line it was first on, or ``file:line`` in another file of a folder."""
    where = f"line {first}" if isinstance(first, int) else first
    return TraceFormatError(path, line, f"duplicate {name} {shown(value)} (also at {where})")


def check_id(path: Path, line: int, name: str, value: str) -> str:
    """``value`` if it can be sent as an id; else a ``TraceFormatError`` at ``line``."""
    rule = id_rule(name, value)
    if rule is not None:
        raise TraceFormatError(path, line, rule)
    return value


def ids_sendable(ids: Iterable[str], limit: int = MAX_ID_CHARS) -> bool:
    """Every id fits ``id_rule`` (one C-level pass; the strict path names the culprit)."""
    ids = list(ids)
    return not ids or (max(map(len, ids)) <= limit and _UNSENDABLE.search("".join(ids)) is None)


def check_round(path: Path, line: int, prompt: int, output: int, where: str = "round") -> None:
    """A round's prompt + output must fit ``MAX_ROUND_TOKENS``."""
    if prompt + output > MAX_ROUND_TOKENS:
        rule = over(f"{where}: prompt {prompt:,} + output {output:,} =", prompt + output,
                    MAX_ROUND_TOKENS, "tokens per round")
        raise TraceFormatError(path, line, rule)


def check_workload(path: str | Path, workload: Workload) -> None:
    """Every round inside the bounds, unit and request ids unique: what readers derived
    (arrivals after rebasing, merged tool waits). The common case is a few C-level
    passes; only a failing workload is walked round by round to name the culprit."""
    units = workload.units
    if isinstance(units, UnitStream):  # one pass, nothing held (ids unique by construction)
        fine = all(_fine((u,), u.rounds) for u in units)
    else:
        rounds = [r for u in units for r in u.rounds]
        fine = (len({u.unit_id for u in units}) == len(units)
                and len({r.request_id for r in rounds}) == len(rounds) and _fine(units, rounds))
    if not fine:
        _name_the_culprit(Path(path), workload)


def _fine(units: Sequence[Unit], rounds: Sequence[Round]) -> bool:
    """``check_workload``'s rules but the uniqueness of ids, for these units and rounds."""
    return (
        all(0 <= u.arrival_ms <= MAX_ARRIVAL_MS for u in units)
        and all(0 <= r.tool_wait_after_ms <= MAX_WAIT_MS for r in rounds)
        and all(r.prefix_len >= 0 and r.input_len >= 0 and r.output_len >= 1 for r in rounds)
        and all(r.prefix_len + r.input_len + r.output_len <= MAX_ROUND_TOKENS for r in rounds)
        and ids_sendable(itertools.chain((u.unit_id for u in units),
                                         (r.request_id for r in rounds)), MAX_WIRE_ID_CHARS)
    )


def _name_the_culprit(path: Path, workload: Workload) -> None:
    unit_ids: set[str] = set()
    requests: set[str] = set()
    for unit in workload.units:
        for rid in (unit.unit_id, *(r.request_id for r in unit.rounds)):
            rule = id_rule(f"unit {unit.unit_id[:60]!r}: id {rid[:60]!r}", rid,
                           MAX_WIRE_ID_CHARS)
            if rule is not None:
                raise TraceFormatError(path, _line_of(path, unit), rule)
        if unit.unit_id in unit_ids:
            raise TraceFormatError(path, 0, f"two units share the id {unit.unit_id!r}")
        unit_ids.add(unit.unit_id)
        if not 0 <= unit.arrival_ms <= MAX_ARRIVAL_MS:  # also refuses NaN
            raise TraceFormatError(path, 0, over(
                f"unit {unit.unit_id!r}: arrival", unit.arrival_ms, MAX_ARRIVAL_MS, "ms"))
        for r in unit.rounds:
            if r.request_id in requests:
                raise TraceFormatError(path, 0, f"two rounds share the request id {r.request_id!r}")
            requests.add(r.request_id)
            where = f"unit {unit.unit_id!r} round {r.round_idx}"
            if min(r.prefix_len, r.input_len) < 0 or r.output_len < 1:
                raise TraceFormatError(path, 0, f"{where}: negative length or no output")
            check_round(path, 0, r.prompt_len, r.output_len, where)
            if not 0 <= r.tool_wait_after_ms <= MAX_WAIT_MS:
                raise TraceFormatError(path, 0, over(
                    f"{where}: tool wait", r.tool_wait_after_ms, MAX_WAIT_MS, "ms"))
    raise TraceFormatError(path, 0, f"workload outside the bounds of {DOC}")


def _line_of(path: Path, unit: object) -> int:
    """The first line of ``path`` that holds the unit's id as the trace wrote it (0: none
    found): for ids a reader derived, whose own check had no line to name."""
    uid = str(getattr(unit, "unit_id", ""))
    needles = [n for n in {uid, uid.rsplit("~", 1)[0], uid.removeprefix("independent_")} if n]
    try:
        with open(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                if number > MAX_TRACE_LINES:
                    break
                text = raw.decode("utf-8", "replace")
                if any(n in text for n in needles):
                    return number
    except OSError:
        pass
    return 0
