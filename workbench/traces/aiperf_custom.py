"""AIPerf's custom text datasets (JSONL): ``single_turn`` (one request a line),
``multi_turn`` (a session's turns a line, lines of one ``session_id`` joined) and
``random_pool`` (a pool of texts AIPerf draws requests from).

A turn is ``text`` or ``texts`` (strings, or ``{"name", "contents": [...]}``), with
``timestamp`` or ``delay`` (ms) and ``role``; no output length (AIPerf's
``--output-tokens-mean`` sets it: here the ``output_len`` option). Token counts:
``text_tokens``. Fields, what AIPerf does with them and the source read:
docs/trace-formats.md, "aiperf-single-turn and aiperf-multi-turn".
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, NamedTuple

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import choice_option
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    first_json_object,
    json_id,
    json_lines,
    json_number,
    note_unknown,
    warn_unknown,
)
from workbench.traces.shared import Request, request_workload, step_aside
from workbench.traces.text_tokens import text_counter

log = logging.getLogger(__name__)

SINGLE, MULTI, POOL = "aiperf-single-turn", "aiperf-multi-turn", "aiperf-random-pool"
#: AIPerf's RandomPool model (aiperf/dataset/loader/models.py): text or texts, and media
POOL_FIELDS = frozenset(("type", "text", "texts"))
TURN_FIELDS = frozenset(("type", "text", "texts", "timestamp", "delay", "role"))
MULTI_FIELDS = frozenset(("type", "session_id", "turns"))
#: media AIPerf sends beside the text: not text tokens, refused (never half-read)
_MEDIA = {key: "images and audio are not text tokens: workbench replays text only"
          for key in ("image", "images", "audio", "audios")}
HISTORY = ("none", "full")
DEFAULT_OUTPUT_LEN = 256  # vLLM's --custom-output-len default; AIPerf has none


class _Turn(NamedTuple):
    line: int
    texts: list[str]
    timestamp: float | None
    delay: float | None


def _texts(path: Path, line: int, where: str, turn: dict[str, Any]) -> list[str]:
    """A turn's text contents (each sent as one content part of one user message)."""
    if "text" in turn and "texts" in turn:
        raise TraceFormatError(path, line, f"{where}text and texts cannot be set together "
                                           "(AIPerf's rule)")
    if "text" in turn:
        value = turn["text"]
        if not isinstance(value, str):
            raise TraceFormatError(path, line, f"{where}text must be a string, got "
                                               f"{bounds.shown(value)}")
        texts = [value]
    elif "texts" in turn:
        value = turn["texts"]
        if not isinstance(value, list):
            raise TraceFormatError(path, line, f"{where}texts must be a list, got "
                                               f"{bounds.shown(value)}")
        texts = []
        for k, item in enumerate(value):
            if isinstance(item, str):
                texts.append(item)
                continue
            contents = item.get("contents") if isinstance(item, dict) else None
            if not isinstance(contents, list) or not all(isinstance(c, str) for c in contents):
                raise TraceFormatError(path, line, (
                    f"{where}texts[{k}] must be a string or an object with 'contents', a "
                    f"list of strings, got {bounds.shown(item)}"))
            texts.extend(contents)
    else:
        raise TraceFormatError(path, line, f"{where}missing field 'text' (or 'texts'): a "
                                           "turn needs text to send")
    texts = [t for t in texts if t.strip()]  # AIPerf skips empty contents
    if not texts:
        raise TraceFormatError(path, line, f"{where}empty text (no content to send or count)")
    return texts


def _turn(path: Path, line: int, where: str, turn: Any, extra: dict[str, int]) -> _Turn:
    """One turn (a ``single_turn`` line, or ``turns[k]`` of a ``multi_turn`` line: ``where``
    is then ``"turns[k]."``)."""
    if not isinstance(turn, dict):
        raise TraceFormatError(path, line, f"{where or 'each line '}must be an object, got "
                                           f"{bounds.shown(turn)}")
    note_unknown(path, line, turn, TURN_FIELDS, extra, where="turns[]." if where else "",
                 refused=_MEDIA)
    if "type" in turn and turn["type"] != "single_turn":
        raise TraceFormatError(path, line, f"{where}type must be 'single_turn', got "
                                           f"{bounds.shown(turn['type'])}")
    texts = _texts(path, line, where, turn)
    ts = turn.get("timestamp")
    delay = turn.get("delay")
    if ts is not None and delay is not None:
        raise TraceFormatError(path, line, f"{where}timestamp and delay cannot be set "
                                           "together (AIPerf's rule)")
    at = None if ts is None else json_number(path, line, f"{where}timestamp", ts,
                                             maximum=bounds.MAX_EPOCH_MS)
    wait = None if delay is None else json_number(path, line, f"{where}delay", delay,
                                                  maximum=bounds.MAX_WAIT_MS)
    role = turn.get("role")
    if role is not None and not isinstance(role, str):
        raise TraceFormatError(path, line, f"{where}role must be a string, got "
                                           f"{bounds.shown(role)}")
    return _Turn(line, texts, at, wait)


def _output_len(value: Any) -> int:
    return _int_option("output_len", value, bounds.MAX_ROUND_TOKENS)


def _int_option(name: str, value: Any, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigError(f"aiperf option {name} must be an integer from 1 to {most:,}, "
                          f"got {bounds.shown(value)}")
    return value


def _origin(path: Path, stamps: list[float]) -> float:
    """What to subtract from the timestamps: the first when all are Unix ms (AIPerf's
    --fixed-schedule-auto-offset does the same), else 0 (ms from the trace's start)."""
    if stamps and min(stamps) >= bounds.UNIX_MS_FROM:
        log.warning("%s: timestamps are Unix time in ms: rebased to the earliest (%d)",
                    path, min(stamps))
        return min(stamps)
    return 0.0


def _reader_meta(counter_meta: dict[str, Any], output_len: int) -> dict[str, Any]:
    return {**counter_meta, "output_len": output_len,
            "output_len_source": "the output_len option (AIPerf's custom datasets carry no "
                                 "output length)"}


def _sniff_single(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    return (obj is not None and ("text" in obj or "texts" in obj)
            and obj.get("type", "single_turn") == "single_turn"
            and not obj.keys() & {"turns", "input_length", "hash_ids", "conversations"})


def _sniff_pool(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    return obj is not None and obj.get("type") == "random_pool"


def _sniff_multi(lines: list[str]) -> bool:
    obj = first_json_object(lines)
    if obj is None or not isinstance(obj.get("turns"), list) or not obj["turns"]:
        return False
    first = obj["turns"][0]
    return (obj.get("type", "multi_turn") == "multi_turn" and isinstance(first, dict)
            and ("text" in first or "texts" in first) and "input_tokens" not in first)


@register_format(MULTI, sniff=_sniff_multi,
                 description="AIPerf multi_turn JSONL: a session's text turns a line "
                             "(options tokenizer, output_len, history)")
def read_aiperf_multi_turn(path: Path, *, tokenizer: str | None = None,
                           output_len: int = DEFAULT_OUTPUT_LEN,
                           history: str = "none") -> Workload:
    """Load an AIPerf ``multi_turn`` file: lines of one ``session_id`` are one session (in
    file order), closed-loop, the wait before turn k+1 its ``delay``; ``history=none``
    sends each turn alone as AIPerf does, ``full`` the session so far before it."""
    out_len = _output_len(output_len)
    choice_option(MULTI, "history", history, HISTORY)
    counter = text_counter(tokenizer)
    path = Path(path)
    extra: dict[str, int] = {}
    sessions: dict[str, list[_Turn]] = {}
    for n, (line, obj, _raw) in enumerate(json_lines(path, MULTI)):
        note_unknown(path, line, obj, MULTI_FIELDS, extra, refused=_MEDIA)
        if "type" in obj and obj["type"] != "multi_turn":
            raise TraceFormatError(path, line, f"type must be 'multi_turn', got "
                                               f"{bounds.shown(obj['type'])}")
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            raise TraceFormatError(path, line, "turns must be a non-empty list (AIPerf's rule)")
        sid_raw = obj.get("session_id")
        # a line without session_id is a session of its own (AIPerf gives it a uuid), named
        # once every id of the file is known
        sid = f"\0{n}" if sid_raw is None else json_id(path, line, "session_id", sid_raw)
        sessions.setdefault(sid, []).extend(
            _turn(path, line, f"turns[{k}].", t, extra) for k, t in enumerate(turns))
    named = {sid for sid in sessions if not sid.startswith("\0")}
    taken: set[str] = set(named)
    sessions = {sid if sid in named else step_aside(f"aiperf_{sid[1:]}", taken): ts
                for sid, ts in sessions.items()}
    all_turns = [t for ts in sessions.values() for t in ts]
    counts = iter(counter.counts([x for t in all_turns for x in t.texts]))
    sizes = {id(t): sum(next(counts) for _ in t.texts) for t in all_turns}
    starts = [ts[0].timestamp for ts in sessions.values() if ts[0].timestamp is not None]
    origin = _origin(path, starts)
    ignored = [t.line for ts in sessions.values() for t in ts[1:] if t.timestamp is not None]
    units = []
    for sid, ts in sessions.items():
        head = ts[0]
        arrival = max((head.timestamp or origin) - origin, 0.0) + (head.delay or 0.0)
        if arrival > bounds.MAX_ARRIVAL_MS:
            raise TraceFormatError(path, head.line, bounds.over(
                "session arrival (timestamp + delay)", arrival, bounds.MAX_ARRIVAL_MS, "ms"))
        rounds = []
        prefix = 0
        for k, t in enumerate(ts):
            fresh = sizes[id(t)]
            if fresh < 1:
                raise TraceFormatError(path, t.line, f"session {sid!r}, turn {k}: its text "
                                                     "counts 0 tokens")
            bounds.check_round(path, t.line, prefix + fresh, out_len, f"session {sid!r} turn {k}")
            wait = (ts[k + 1].delay or 0.0) if k + 1 < len(ts) else 0.0
            rounds.append(Round(f"{sid}_turn_{k}", sid, k, arrival if k == 0 else 0.0,
                                prefix, fresh, out_len, wait))
            if history == "full":
                prefix += fresh + out_len
        units.append(Unit(sid, "session", arrival, tuple(rounds)))
    meta: dict[str, Any] = {"reader": {**_reader_meta(counter.describe(), out_len),
                                       "history": history}}
    if origin:
        meta["arrival_origin_ms"] = origin
    if ignored:
        meta["ignored_turn_timestamps"] = len(ignored)
        log.warning("%s: %d later turns carry a timestamp (first at line %d): ignored, a "
                    "session's turns run closed-loop after its first (the wait is the next "
                    "turn's delay)", path, len(ignored), ignored[0])
    warn_unknown(path, extra, meta)
    return Workload(tuple(units), MULTI, str(path), None, meta)


@register_format(SINGLE, sniff=_sniff_single,
                 description="AIPerf single_turn JSONL: one text request a line "
                             "(options tokenizer, output_len)")
def read_aiperf_single_turn(path: Path, *, tokenizer: str | None = None,
                            output_len: int = DEFAULT_OUTPUT_LEN) -> Workload:
    """Load an AIPerf ``single_turn`` file: one independent request a line, at its
    ``timestamp``, or ``delay`` ms after the line above, else with the line above."""
    out_len = _output_len(output_len)
    counter = text_counter(tokenizer)
    path = Path(path)
    extra: dict[str, int] = {}
    turns = [_turn(path, line, "", obj, extra)
             for line, obj, _raw in json_lines(path, SINGLE)]
    counts = iter(counter.counts([x for t in turns for x in t.texts]))
    sizes = [sum(next(counts) for _ in t.texts) for t in turns]
    origin = _origin(path, [t.timestamp for t in turns if t.timestamp is not None])
    requests: list[Request] = []
    at = 0.0
    for n, (t, size) in enumerate(zip(turns, sizes, strict=True)):
        if size < 1:
            raise TraceFormatError(path, t.line, "its text counts 0 tokens")
        bounds.check_round(path, t.line, size, out_len)
        at = t.timestamp - origin if t.timestamp is not None else at + (t.delay or 0.0)
        if at < 0:
            raise TraceFormatError(path, t.line, "timestamp earlier than the first Unix-ms "
                                                 "timestamp: a file mixes two clocks")
        requests.append(Request(t.line, n, at, size, out_len, {}))
    meta: dict[str, Any] = {"reader": _reader_meta(counter.describe(), out_len)}
    if origin:
        meta["arrival_origin_ms"] = origin
    warn_unknown(path, extra, meta)
    return request_workload(path, SINGLE, requests, meta, time_column="timestamp",
                            prompt_column="text", empty=[])


@register_format(POOL, sniff=_sniff_pool,
                 description="AIPerf random_pool JSONL: a pool of texts, each sent once, or "
                             "drawn (options tokenizer, output_len, samples, seed)")
def read_aiperf_random_pool(path: Path, *, tokenizer: str | None = None,
                            output_len: int = DEFAULT_OUTPUT_LEN, samples: int | None = None,
                            seed: int = 0) -> Workload:
    """Load an AIPerf ``random_pool`` file: each entry one independent request at 0, in
    file order; ``samples=N``: N entries drawn with replacement, as AIPerf draws its
    ``--conversation-num`` (``random.choices``), seeded by ``seed``."""
    out_len = _output_len(output_len)
    drawn = None if samples is None else _int_option("samples", samples, bounds.MAX_TRACE_LINES - 1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"aiperf option seed must be an integer, got {bounds.shown(seed)}")
    counter = text_counter(tokenizer)
    path = Path(path)
    extra: dict[str, int] = {}
    pool: list[tuple[int, list[str]]] = []  # (line, texts)
    for line, obj, _raw in json_lines(path, POOL):
        note_unknown(path, line, obj, POOL_FIELDS, extra, refused=_MEDIA)
        if "type" in obj and obj["type"] != "random_pool":
            raise TraceFormatError(path, line, f"type must be 'random_pool', got "
                                               f"{bounds.shown(obj['type'])}")
        pool.append((line, _texts(path, line, "", obj)))
    counts = iter(counter.counts([x for _, texts in pool for x in texts]))
    sizes = [sum(next(counts) for _ in texts) for _, texts in pool]
    for (line, _), size in zip(pool, sizes, strict=True):
        if size < 1:
            raise TraceFormatError(path, line, "its text counts 0 tokens")
        bounds.check_round(path, line, size, out_len)
    picks = (range(len(pool)) if drawn is None
             else random.Random(seed).choices(range(len(pool)), k=drawn))
    requests = [Request(pool[i][0], n, 0.0, sizes[i], out_len, {"pool_entry": i})
                for n, i in enumerate(picks)]
    reader = {**_reader_meta(counter.describe(), out_len), "samples": drawn}
    if drawn is not None:
        reader["seed"] = seed
    meta: dict[str, Any] = {"reader": reader}
    warn_unknown(path, extra, meta)
    return request_workload(path, POOL, requests, meta, time_column="timestamp",
                            prompt_column="text", empty=[])
