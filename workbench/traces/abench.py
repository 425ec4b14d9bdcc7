"""agentic-bench ("Abench") session JSONL (one session a line) → sessions arriving at 0.

Fields and mapping (``prefix_len = cached_tokens``, the wait after round i the
``pre_gap_ms`` of turn i+1): docs/trace-formats.md, "abench".
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import Any

from workbench.errors import TraceFormatError
from workbench.plurals import noun
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    first_json_object,
    json_id,
    json_int,
    json_number,
    json_tokens,
    note_unknown,
    unit_per_line,
    warn_unknown,
)

_TURN_FIELDS = ("index", "input_tokens", "output_tokens", "cached_tokens", "pre_gap_ms")
#: every field agentic-bench writes: the others are named in one warning (json_io.note_unknown)
KNOWN_FIELDS = frozenset(("session_id", "source", "system_prompt", "turns"))
KNOWN_TURN_FIELDS = frozenset((*_TURN_FIELDS, "input_delta", "assistant_text", "tool_calls"))


def _turn(path: Path, line: int, k: int, turn: Any,
          extra: dict[str, int]) -> tuple[int, int, int, int, float]:  # fmt: skip
    """``(index, input_tokens, output_tokens, cached_tokens, pre_gap_ms)`` of ``turns[k]``."""
    if not isinstance(turn, dict):
        raise TraceFormatError(path, line, f"turns[{k}] must be an object")
    note_unknown(path, line, turn, KNOWN_TURN_FIELDS, extra, where="turns[].")
    missing = [f for f in _TURN_FIELDS if f not in turn]
    if missing:
        raise TraceFormatError(
            path, line, f"missing {noun(len(missing), 'field')} {', '.join(missing)} in turns[{k}]")
    name = f"turns[{k}]."
    index = json_int(path, line, name + "index", turn["index"])
    inp = json_tokens(path, line, name + "input_tokens", turn["input_tokens"], minimum=1)
    out = json_tokens(path, line, name + "output_tokens", turn["output_tokens"], minimum=1)
    bounds.check_round(path, line, inp, out, f"turns[{k}]")
    cached = json_tokens(path, line, name + "cached_tokens", turn["cached_tokens"])
    if cached > inp:
        raise TraceFormatError(path, line, f"{name}cached_tokens {cached} > input_tokens {inp}")
    gap = json_number(path, line, name + "pre_gap_ms", turn["pre_gap_ms"],
                      maximum=bounds.MAX_WAIT_MS)
    return index, inp, out, cached, gap


def _session(path: Path, line: int, obj: dict[str, Any], extra: dict[str, int]) -> Unit:
    note_unknown(path, line, obj, KNOWN_FIELDS, extra)
    for key in ("session_id", "turns"):
        if key not in obj:
            raise TraceFormatError(path, line, f"missing field {key!r}")
    sid = json_id(path, line, "session_id", obj["session_id"])
    system_prompt = obj.get("system_prompt")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise TraceFormatError(path, line, "system_prompt must be a string")
    turns = obj["turns"]
    if not isinstance(turns, list) or not turns:
        raise TraceFormatError(path, line, "turns must be a non-empty list")
    parsed = [_turn(path, line, k, t, extra) for k, t in enumerate(turns)]
    for k in range(1, len(parsed)):
        if parsed[k][0] <= parsed[k - 1][0]:
            raise TraceFormatError(path, line, f"turns[{k}].index {parsed[k][0]} does not increase")
    rounds = []
    for k, (index, inp, out, cached, _gap) in enumerate(parsed):
        wait = parsed[k + 1][4] if k + 1 < len(parsed) else 0.0
        rounds.append(Round(f"{sid}_turn_{index}", sid, k, 0.0, cached, inp - cached, out, wait))
    meta = {"system_prompt_chars": len(system_prompt or ""), "first_pre_gap_ms": parsed[0][4]}
    return Unit(sid, "session", 0.0, tuple(rounds), meta)


def _sniff(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    if obj is None or "session_id" not in obj or not isinstance(obj.get("turns"), list):
        return False
    first = obj["turns"][0] if obj["turns"] else None  # AIPerf's multi_turn turns hold text
    return not (isinstance(first, dict) and ("text" in first or "texts" in first))


@register_format(
    "abench",
    sniff=_sniff,
    description="agentic-bench session JSONL: one session with recorded turns a line",
)
def read_abench(path: Path) -> Workload:
    """Load an abench session file: each line one session, all arriving at 0; fields it
    does not know named in one warning."""
    path, extra = Path(path), dict[str, int]()
    workload = unit_per_line(path, "abench", partial(_session, extra=extra), "session_id")
    meta: dict[str, Any] = {}
    warn_unknown(path, extra, meta)
    return dataclasses.replace(workload, meta=meta) if meta else workload
