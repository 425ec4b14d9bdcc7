"""ShareGPT conversations (JSON array, or one conversation a line) → sessions of rounds.

``[{"id": ..., "conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}]``,
vLLM's default benchmark dataset. Round k's prompt is the conversation so far (system
turns, every earlier question and recorded reply) and human turn k; its output length is
the recorded reply's token count (``text_tokens``). ``turns=first`` is vLLM's
single-turn sampling instead. Every rule and its source: docs/trace-formats.md, "sharegpt".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from workbench.errors import ConfigError, TraceFormatError
from workbench.plurals import counted
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import choice_option, read_text
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    array_element_lines,
    json_id,
    note_unknown,
    text_json_lines,
    warn_unknown,
)
from workbench.traces.shared import request_id
from workbench.traces.text_tokens import text_counter

log = logging.getLogger(__name__)

FORMAT = "sharegpt"
#: ``from`` values and the role each is (vLLM's benchmarks/multi_turn/convert_sharegpt_to_openai.py)
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
         "bing": "assistant", "bard": "assistant", "assistant": "assistant",
         "system": "system"}
KNOWN_FIELDS = frozenset(("id", "conversations"))
KNOWN_TURN_FIELDS = frozenset(("from", "value"))
#: a conversation's media: not text tokens (vLLM's sharegpt attaches them to the prompt)
_REFUSED = {key: "images and videos are not text tokens: workbench replays text only"
            for key in ("image", "video")}
TURNS = ("all", "first")
LENGTHS = ("all", "vllm")
#: vLLM's is_valid_sequence defaults (vllm/benchmarks/datasets.py): min 4 tokens each,
#: prompt at most 1024, prompt + output at most 2048
_VLLM_MIN, _VLLM_PROMPT, _VLLM_TOTAL = 4, 1024, 2048


class _Turn(NamedTuple):
    role: str
    value: str


class _Conversation(NamedTuple):
    nth: int  # its place in the file (0-based)
    where: str  # "conversation 3 (id 'x')", named in errors
    sid: str
    turns: list[_Turn]


def _where(index: int, cid: Any) -> str:
    named = f" (id {bounds.shown(cid)})" if cid is not None else ""
    return f"conversation {index}{named}"


class _Records:
    """A file's conversation records and where each starts."""

    def __init__(self, path: Path, items: list[tuple[int, Any]], array: bool) -> None:
        self.path = path
        self.items = items  # (line, record): line 0 in an array, found when named
        self.array = array
        self._lines: list[int] = []  # the array's element lines found so far

    def line(self, index: int) -> int:
        """Record ``index``'s line: its own in JSON lines; in an array, where the element
        starts, found by reading the file again and scanning up to it
        (``array_element_lines``) only when an error or a warning names it, so a file
        that loads costs nothing more (docs/trace-formats.md, "sharegpt")."""
        if not self.array:
            return self.items[index][0]
        if index >= len(self._lines):
            self._lines = array_element_lines(read_text(self.path), index)
        return self._lines[index] if index < len(self._lines) else 0  # 0: the file changed

    def located(self, exc: TraceFormatError, index: int) -> TraceFormatError:
        """``exc`` (about record ``index``) with that record's line, when it had none."""
        if exc.line:
            return exc
        return TraceFormatError(self.path, self.line(index), exc.rule)


def _records(path: Path) -> _Records:
    """An array's elements, or one object a line."""
    text = read_text(path)
    if text.lstrip().startswith("["):
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(path, exc.lineno, f"invalid JSON ({exc.msg})") from None
        if not isinstance(doc, list):  # pragma: no cover - starts with "["
            raise TraceFormatError(path, 1, "a ShareGPT file is a JSON array of conversations")
        return _Records(path, [(0, rec) for rec in doc], True)
    first = text.lstrip().split("\n", 1)[0].strip()
    if not first.startswith("{") or first == "{":  # not JSON, or one object over lines
        line = text[: len(text) - len(text.lstrip())].count("\n") + 1
        raise TraceFormatError(path, line, "a ShareGPT file is a JSON array of conversations "
                                           "(or one conversation object a line)")
    return _Records(path, [(line, obj) for line, obj, _raw
                           in text_json_lines(path, text, "a conversation object", fmt=FORMAT)],
                    False)


def _conversation(path: Path, line: int, index: int, rec: Any,
                  extra: dict[str, int]) -> _Conversation:  # fmt: skip
    if not isinstance(rec, dict):
        raise TraceFormatError(path, line, f"conversation {index} must be an object with "
                                           f"'conversations', got {bounds.shown(rec)}")
    cid = rec.get("id")
    where = _where(index, cid)
    note_unknown(path, line, rec, KNOWN_FIELDS, extra, refused=_REFUSED, mark=line or index)
    sid = f"sharegpt_{index}" if cid is None else json_id(path, line, f"{where}: id", cid)
    turns = rec.get("conversations")
    if not isinstance(turns, list):
        raise TraceFormatError(path, line, f"{where}: 'conversations' must be a list of "
                                           f"turns, got {bounds.shown(turns)}")
    out: list[_Turn] = []
    for k, turn in enumerate(turns):
        at = f"{where}, turn {k}"
        if not isinstance(turn, dict):
            raise TraceFormatError(path, line, f"{at} must be an object with 'from' and "
                                               f"'value', got {bounds.shown(turn)}")
        note_unknown(path, line, turn, KNOWN_TURN_FIELDS, extra, where="conversations[].",
                     mark=line or index)
        for key in ("from", "value"):
            if key not in turn:
                raise TraceFormatError(path, line, f"{at}: missing field {key!r}")
        role = ROLES.get(turn["from"]) if isinstance(turn["from"], str) else None
        if role is None:
            raise TraceFormatError(path, line, (
                f"{at}: 'from' must be one of {', '.join(ROLES)}, got "
                f"{bounds.shown(turn['from'])}"))
        value = turn["value"]
        if not isinstance(value, str):
            raise TraceFormatError(path, line, f"{at}: 'value' must be a string, got "
                                               f"{bounds.shown(value)}")
        if not value.strip():
            raise TraceFormatError(path, line, f"{at}: empty 'value' (a turn with no text "
                                               "has no tokens to send or to count)")
        out.append(_Turn(role, value))
    _check_order(path, line, where, out)
    return _Conversation(index, where, sid, out)


def _check_order(path: Path, line: int, where: str, turns: list[_Turn]) -> None:
    """System turns first; then human and gpt turns alternate (a leading gpt turn, a
    follow-up to an earlier conversation, is allowed: it is left out)."""
    previous = None
    for k, turn in enumerate(turns):
        if turn.role == "system":
            if previous not in (None, "system"):
                raise TraceFormatError(path, line, (
                    f"{where}, turn {k}: a system turn after the conversation began (system "
                    "turns come first)"))
        elif turn.role == previous:
            who = "human" if turn.role == "user" else "gpt"
            raise TraceFormatError(path, line, (
                f"{where}, turn {k}: two {who} turns in a row (turns {k - 1} and {k}); "
                "human and gpt turns alternate"))
        previous = turn.role


def _sniff(lines: list[str]) -> bool:
    """An array (or a line) whose first record has ``conversations``; a pretty-printed
    array shows its first keys on lines of their own."""
    head = "\n".join(lines)
    return head.lstrip().startswith(("[", "{")) and '"conversations"' in head and (
        '"from"' in head or lines[0].strip() in ("[", "[{", "{"))


@register_format(FORMAT, sniff=_sniff,
                 description="ShareGPT JSON: conversations of human/gpt turns, as text "
                             "(options tokenizer, turns, lengths)")
def read_sharegpt(path: Path, *, tokenizer: str | None = None, turns: str = "all",
                  lengths: str = "all") -> Workload:
    """Load ShareGPT conversations: each a session of rounds arriving at 0 (``turns=all``),
    or vLLM's single-turn sampling, each conversation's first two turns one independent
    request (``turns=first``; ``lengths=vllm`` adds vLLM's length filters). Token counts
    by ``tokenizer`` (a tokenizer.json), else words (said in ``meta["reader"]``)."""
    turns = choice_option(FORMAT, "turns", turns, TURNS)
    lengths = choice_option(FORMAT, "lengths", lengths, LENGTHS)
    if lengths == "vllm" and turns != "first":
        raise ConfigError(f"{FORMAT} option lengths=vllm is vLLM's single-turn filter: "
                          "it needs turns=first")
    counter = text_counter(tokenizer)
    path = Path(path)
    extra: dict[str, int] = {}  # unknown field → its first line (its record, in an array)
    records = _records(path)
    convs: list[_Conversation] = []
    for i, (line, rec) in enumerate(records.items):
        try:
            convs.append(_conversation(path, line, i, rec, extra))
        except TraceFormatError as exc:
            raise records.located(exc, i) from None
    if not convs:
        raise TraceFormatError(path, 1, "no conversation: the array is empty")
    seen: dict[str, int] = {}  # each id's conversation
    for c in convs:
        if c.sid in seen:
            raise bounds.duplicate(path, records.line(c.nth), f"{c.where}: id", c.sid,
                                   records.line(seen[c.sid]))
        seen[c.sid] = c.nth
    counts = counter.counts([t.value for c in convs for t in c.turns])
    meta: dict[str, Any] = {"reader": {**counter.describe(), "turns": turns,
                                       "lengths": lengths}}
    if records.array and extra:
        records.line(max(extra.values(), default=0))  # one scan for them all
        extra = {key: records.line(i) for key, i in extra.items()}
    warn_unknown(path, extra, meta)
    units = (_sessions(records, convs, counts, meta) if turns == "all"
             else _first_turns(records, convs, counts, meta, lengths == "vllm"))
    if not units:
        raise TraceFormatError(path, 0, "no conversation to replay: each has no human turn "
                                        "answered by a gpt turn (or was filtered out)")
    return Workload(tuple(units), FORMAT, str(path), None, meta)


def _sessions(records: _Records, convs: list[_Conversation], counts: list[int],
              meta: dict[str, Any]) -> list[Unit]:  # fmt: skip
    """Round k: prefix = round k−1's prompt and reply, input = human turn k (with the system
    turns on round 0), output = gpt turn k's count."""
    path = records.path
    units: list[Unit] = []
    at = 0
    leading: list[int] = []
    unanswered: list[int] = []
    empty: list[int] = []
    for n, c in enumerate(convs):
        sizes = counts[at: at + len(c.turns)]
        at += len(c.turns)
        system = sum(s for t, s in zip(c.turns, sizes, strict=True) if t.role == "system")
        pairs = [(t, s) for t, s in zip(c.turns, sizes, strict=True) if t.role != "system"]
        if pairs and pairs[0][0].role == "assistant":
            leading.append(n)
            pairs = pairs[1:]
        if len(pairs) % 2:
            unanswered.append(n)
            pairs = pairs[:-1]
        rounds: list[Round] = []
        prefix, fresh = 0, system
        for k in range(0, len(pairs), 2):
            question, reply = pairs[k][1], pairs[k + 1][1]
            fresh += question
            if min(fresh, reply) < 1:
                raise TraceFormatError(path, records.line(c.nth), (
                    f"{c.where}, round {k // 2}: a turn counts 0 tokens (its text has none "
                    "by this tokenizer)"))
            try:
                bounds.check_round(path, 0, prefix + fresh, reply, f"{c.where}, round {k // 2}")
            except TraceFormatError as exc:
                raise records.located(exc, c.nth) from None
            rounds.append(Round(request_id(c.sid, k // 2), c.sid, k // 2, 0.0, prefix, fresh,
                                reply))
            prefix, fresh = prefix + fresh + reply, 0
        if not rounds:
            empty.append(n)
            continue
        units.append(Unit(c.sid, "session", 0.0, tuple(rounds)))
    _note(records, meta, "skipped_leading_replies", leading, "starting with a gpt turn (a "
          "follow-up to an earlier conversation)", "that turn left out")
    _note(records, meta, "unanswered_last_turns", unanswered, "ending with a human turn no gpt "
          "turn answers", "that turn left out (its output length is unknown)")
    _note(records, meta, "skipped_conversations", empty, "without a human turn answered by a "
          "gpt turn", "skipped")
    return units


def _first_turns(records: _Records, convs: list[_Conversation], counts: list[int],
                 meta: dict[str, Any], vllm: bool) -> list[Unit]:  # fmt: skip
    """vLLM's ``ShareGPTDataset.sample``: turn 0's text is the prompt, turn 1's count the
    output, whatever their roles; fewer than two turns, skipped."""
    path = records.path
    units: list[Unit] = []
    at = 0
    short: list[int] = []
    filtered: list[int] = []
    for n, c in enumerate(convs):
        sizes = counts[at: at + len(c.turns)]
        at += len(c.turns)
        if len(sizes) < 2:
            short.append(n)
            continue
        prompt, out = sizes[0], sizes[1]
        if vllm and (min(prompt, out) < _VLLM_MIN or prompt > _VLLM_PROMPT
                     or prompt + out > _VLLM_TOTAL):
            filtered.append(n)
            continue
        if min(prompt, out) < 1:
            raise TraceFormatError(path, records.line(c.nth),
                                   f"{c.where}: a turn counts 0 tokens")
        try:
            bounds.check_round(path, 0, prompt, out, c.where)
        except TraceFormatError as exc:
            raise records.located(exc, c.nth) from None
        rnd = Round(c.sid, c.sid, 0, 0.0, 0, prompt, out)
        units.append(Unit(c.sid, "independent", 0.0, (rnd,)))
    _note(records, meta, "skipped_conversations", short, "with fewer than two turns", "skipped")
    _note(records, meta, "skipped_by_length_filter", filtered, "outside vLLM's length "
          f"filter (each at least {_VLLM_MIN} tokens, prompt at most {_VLLM_PROMPT}, prompt + "
          f"output at most {_VLLM_TOTAL})", "skipped")
    return units


def _note(records: _Records, meta: dict[str, Any], key: str, indices: list[int], what: str,
          done: str) -> None:
    """One warning for the conversations a reader skipped or cut (their indices in the
    file), their count in ``meta[key]`` (never silently: docs/trace-formats.md)."""
    if indices:
        meta[key] = len(indices)
        log.warning("%s: %s %s (the first: conversation %d, line %d): %s", records.path,
                    counted(len(indices), "conversation", "conversations"), what, indices[0],
                    records.line(indices[0]), done)
