"""Captured coding-agent traces (kv-cache-tester's format; AIPerf's "Weka" traces) → sessions.

One JSON object per conversation, in a ``.json`` file, a JSONL, a JSON array or a
folder of them. The format, its sources and every decision here (sub-agent markers,
local hash-id namespaces, the warm prefix, the timing strategies, ``pairs``) are in
docs/weka-traces.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError, TraceFormatError
from workbench.records import Round, Spawn, SpawnTrigger, Unit, Workload
from workbench.traces import bounds
from workbench.traces._io import folder_files, read_text
from workbench.traces.formats import register_format
from workbench.traces.json_io import (
    array_element_lines,
    document_rule,
    json_id,
    json_int,
    json_number,
    json_tokens,
    note_unknown,
    text_json_lines,
    warn_unknown,
)
from workbench.traces.shared import leading_seen_blocks

FORMAT = "weka"
ALIASES = ("kv-cache-tester", "agentx")
TIMINGS = ("think-only", "original", "api-scaled")
PAIRS = ("keep", "collapse")
SCOPES = ("local", "global")
SUBAGENTS = ("wait", "recorded")
SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
MAX_DEPTH = 16  # sub-agents inside sub-agents: deeper than this is a broken file
#: the format's own fields (those replay does not need included); others are warned about
KNOWN_CONVERSATION = frozenset(("id", "models", "block_size", "hash_id_scope", "tool_tokens",
                                "system_tokens", "requests", "totals",
                                # workbench capture's counts (docs/capture.md)
                                "requests_prefix_unknown", "requests_not_recorded"))
KNOWN_REQUEST = frozenset(("t", "type", "model", "in", "out", "hash_ids", "input_types",
                           "output_types", "stop", "api_time", "think_time", "ttft"))
KNOWN_MARKER = frozenset(("t", "type", "agent_id", "subagent_type", "duration_ms",
                          "total_tokens", "tool_use_count", "status", "requests", "models",
                          "tool_tokens", "system_tokens"))
_LOCAL_BITS = 23  # a local hash id lives in the low 23 bits of its namespaced id


@dataclass(frozen=True)
class _Request:
    where: str  # JSON path, for errors
    t: float
    stream: bool
    model: str
    prompt: int
    output: int
    hashes: tuple[int, ...]
    api_time: float | None
    think_time: float | None


@dataclass
class _Agent:
    """One agent (a conversation's root, or a sub-agent) as read: requests and markers."""

    unit_id: str
    line: int
    conversation: str
    kind: str  # "root" or the marker's subagent_type
    tool_tokens: int
    system_tokens: int
    items: list[_Request | tuple[float, _Agent]] = field(default_factory=list)
    duration_s: float | None = None  # a sub-agent's recorded run (its marker's duration_ms)

    def recorded_end(self, start: float) -> float:
        """When this sub-agent, started at ``start``, ended in its parent's timeline
        (docs/weka-traces.md, ``subagents: recorded``)."""
        if self.duration_s is not None:
            return start + self.duration_s
        reqs = [it for it in self.items if isinstance(it, _Request)]
        if not reqs:
            return start
        last = reqs[-1].t + (reqs[-1].api_time or 0.0)
        return start + last if reqs[0].t < start else max(last, start)


@dataclass(frozen=True)
class _Source:
    """A conversation's file and line (errors name both)."""

    path: Path
    line: int


def _options(out: dict[str, Any]) -> dict[str, Any]:
    """The reader's options, checked (docs/weka-traces.md; unknown ones ``load_trace`` refuses)."""
    for name, choices in (("timing", TIMINGS), ("subagents", SUBAGENTS), ("pairs", PAIRS)):
        if out[name] not in choices:
            raise ConfigError(f"{FORMAT} reader: {name} must be one of {', '.join(choices)}, "
                              f"got {out[name]!r}")
    for name, lo, hi in (("api_time_scale", 0.0, 1e6), ("warm_prefix_pct", 0.0, 1.0)):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise ConfigError(f"{FORMAT} reader: {name} must be a number in [{lo:g}, {hi:g}], "
                              f"got {v!r}")
    cap = out["max_delay_s"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int | float)
                            or not 0 <= cap <= bounds.MAX_WAIT_MS / 1000):
        raise ConfigError(f"{FORMAT} reader: max_delay_s must be null or a number of seconds "
                          f"in [0, {bounds.MAX_WAIT_MS / 1000:,.0f}], got {cap!r}")
    return out


# -- files --------------------------------------------------------------------------------


def trace_files(path: Path) -> list[Path]:
    """The files a path stands for: itself, or a folder's ``*.json``/``*.jsonl`` by name,
    hidden ones left out (``_io.folder_files``: as detection and the trace's sha256)."""
    if not path.is_dir():
        return [path]
    files = folder_files(path, SUFFIXES)
    if not files:
        raise TraceFormatError(path, 0, f"folder has no {', '.join(SUFFIXES)} files")
    return files


def _sources(path: Path) -> Iterator[tuple[_Source, dict[str, Any]]]:
    """Every conversation object of one file, with its line (a whole-file JSON's first
    non-blank one; its own in a JSONL)."""
    text = read_text(path)  # regular, bounded, UTF-8, not blank, its BOM dropped
    start, end = _content_span(text)  # no copy of a text that can be 1 GiB
    line_end = text.find("\n", start)
    line_end = end if line_end < 0 else _content_span(text, start, line_end)[1]
    whole: Any = None
    if line_end < end and text[start] == "{" and text[line_end - 1] == "}":
        pass  # JSONL: never parsed whole (orjson sets aside memory for the whole text)
    else:
        try:
            whole = orjson.loads(text)
        except orjson.JSONDecodeError as exc:  # JSONL, or broken: the lines say which
            if document_rule(text, FORMAT) is not None:  # an array, an object over lines
                raise TraceFormatError(path, exc.lineno, f"invalid JSON at line "
                                       f"{exc.lineno} column {exc.colno} (char {exc.pos}): "
                                       f"{exc.msg}; the file is one JSON document and does "
                                       "not parse from there (cut short?)") from None
    if isinstance(whole, dict | list):
        src = _Source(path, text.count("\n", 0, start) + 1)
        # each element's own line (one scan, no second parse: json_io.array_element_lines)
        lines = array_element_lines(text, len(whole) - 1) if isinstance(whole, list) else []
        del text  # the document is read: its text is let go
    if isinstance(whole, dict):
        yield src, whole
    elif isinstance(whole, list):
        if not whole:
            raise TraceFormatError(path, src.line, "the list holds no conversation")
        for i, obj in enumerate(whole):
            at = _Source(path, lines[i])
            if not isinstance(obj, dict):
                raise TraceFormatError(path, at.line,
                                       f"[{i}]: each conversation must be a JSON object")
            yield at, obj
    else:
        what = "a conversation (a JSON object)"
        for lineno, obj, _ in text_json_lines(path, text, what, fmt=FORMAT):
            yield _Source(path, lineno), obj


def _content_span(text: str, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
    """Where ``text[lo:hi]`` stripped of its leading and trailing white space starts and
    ends (indices into ``text``; no copy of it)."""
    end = len(text) if hi is None else hi
    start = next((m.start() for m in _NOT_SPACE.finditer(text, lo, end)), end)
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


_NOT_SPACE = re.compile(r"\S")


# -- conversations -------------------------------------------------------------------------


def _int_field(src: _Source, obj: dict[str, Any], where: str, key: str, default: int | None,
               minimum: int = 0) -> int:
    if key not in obj or obj[key] is None:
        if default is None:
            raise TraceFormatError(src.path, src.line, f"{where}missing field {key!r}")
        return default
    return json_int(src.path, src.line, f"{where}{key}", obj[key], minimum=minimum,
                    maximum=bounds.MAX_ROUND_TOKENS)


def _seconds(src: _Source, where: str, key: str, value: Any) -> float:
    return json_number(src.path, src.line, f"{where}{key}", value,
                       maximum=bounds.MAX_ARRIVAL_MS / 1000, unit="s")


def _str_list(src: _Source, where: str, value: Any) -> None:
    if value is not None and not (isinstance(value, list)
                                  and all(isinstance(v, str) for v in value)):
        raise TraceFormatError(src.path, src.line, f"{where} must be a list of strings, got "
                               f"{value!r:.60}")


def _hashes(src: _Source, where: str, value: Any, prompt: int, block: int) -> list[int]:
    if not isinstance(value, list):
        raise TraceFormatError(src.path, src.line, f"{where}hash_ids must be a list of "
                               f"integers, got {value!r:.60}")
    if any(type(h) is not int for h in value):
        bad = next(h for h in value if type(h) is not int)
        raise TraceFormatError(src.path, src.line, f"{where}hash_ids: each id must be an "
                               f"integer, got {bad!r:.40}")
    most = -(-prompt // block)
    if len(value) > most:
        raise TraceFormatError(src.path, src.line, f"{where}hash_ids: {len(value)} ids of "
                               f"{block} tokens for a prompt of {prompt} tokens (at most "
                               f"ceil({prompt}/{block}) = {most})")
    return value


def _request(src: _Source, where: str, r: dict[str, Any], block: int, ids: _Ids,
             seen: dict[str, int]) -> _Request:  # fmt: skip
    note_unknown(src.path, src.line, r, KNOWN_REQUEST, seen, where="requests[].")
    for key in ("t", "in", "out"):
        if r.get(key) is None:
            raise TraceFormatError(src.path, src.line, f"{where}missing field {key!r}")
    prompt = json_tokens(src.path, src.line, f"{where}in", r["in"], minimum=1)
    output = json_tokens(src.path, src.line, f"{where}out", r["out"])
    bounds.check_round(src.path, src.line, prompt, max(output, 1), where=where.rstrip("."))
    model = r.get("model", "")
    if not isinstance(model, str):
        raise TraceFormatError(src.path, src.line, f"{where}model must be a string, got "
                               f"{model!r:.40}")
    for key in ("input_types", "output_types"):
        _str_list(src, f"{where}{key}", r.get(key))
    optional = {k: (None if r.get(k) is None else _seconds(src, where, k, r[k]))
                for k in ("api_time", "think_time")}
    return _Request(where, _seconds(src, where, "t", r["t"]), r["type"] == "s", model, prompt,
                    output, ids(where, _hashes(src, where, r.get("hash_ids", []), prompt, block)),
                    optional["api_time"], optional["think_time"])


def _agent(src: _Source, reqs: Any, where: str, agent: _Agent, block: int, ids: _Ids,
           depth: int, seen: dict[str, int], counts: Counter[str]) -> None:  # fmt: skip
    """Fill ``agent.items`` from its ``requests`` list (recursing into markers)."""
    if not isinstance(reqs, list):
        raise TraceFormatError(src.path, src.line, f"{where}requests must be a list, got "
                               f"{reqs!r:.40}")
    if depth > MAX_DEPTH:
        raise TraceFormatError(src.path, src.line, f"{where}sub-agents nested deeper than "
                               f"{MAX_DEPTH} levels")
    names: Counter[str] = Counter()
    for i, r in enumerate(reqs):
        reqs[i] = None  # its JSON let go once read (a conversation can be GBs of ids)
        at = f"{where}requests[{i}]."
        if not isinstance(r, dict):
            raise TraceFormatError(src.path, src.line, f"{at[:-1]} must be an object")
        kind = r.get("type")
        if kind is None:  # upstream's replayer: a request streams unless it says otherwise
            kind = "subagent" if "requests" in r else "s"
            counts["untyped_entries"] += 1
        if kind in ("s", "n"):
            if "hash_ids" not in r:
                counts["requests_without_hash_ids"] += 1
            agent.items.append(_request(src, at, {**r, "type": kind}, block, ids, seen))
        elif kind == "subagent":
            note_unknown(src.path, src.line, r, KNOWN_MARKER, seen, where="subagent.")
            t = _seconds(src, at, "t", r.get("t", 0.0))
            name = r.get("agent_id")
            name = f"agent_{sum(names.values()) + 1:03d}" if name is None else json_id(
                src.path, src.line, f"{at}agent_id", name)
            names[name] += 1
            suffix = "" if names[name] == 1 else f".{names[name]}"
            kind_name = r.get("subagent_type", "subagent")
            child = _Agent(f"{agent.unit_id}::sa:{name}{suffix}", src.line, agent.conversation,
                           kind_name if isinstance(kind_name, str) else "subagent",
                           _int_field(src, r, at, "tool_tokens", 0),
                           _int_field(src, r, at, "system_tokens", 0))
            if r.get("duration_ms") is not None:
                child.duration_s = json_number(src.path, src.line, f"{at}duration_ms",
                                               r["duration_ms"],
                                               maximum=bounds.MAX_ARRIVAL_MS) / 1000.0
            _agent(src, r.get("requests", []), at, child, block, ids, depth + 1, seen, counts)
            if not _has_requests(child):
                counts["empty_subagents"] += 1  # kv-cache-tester skips them too
                continue
            agent.items.append((t, child))
        else:
            raise TraceFormatError(src.path, src.line, f"{at}type must be 's' (streaming), 'n' "
                                   f"(non-streaming) or 'subagent', got {kind!r:.40}")


def _has_requests(agent: _Agent) -> bool:
    return any(isinstance(it, _Request) or _has_requests(it[1]) for it in agent.items)


def _conversation(src: _Source, obj: dict[str, Any], seen: dict[str, int],
                  counts: Counter[str]) -> tuple[_Agent, int, _Ids]:  # fmt: skip
    note_unknown(src.path, src.line, obj, KNOWN_CONVERSATION, seen)
    if obj.get("id") is None:
        raise TraceFormatError(src.path, src.line, "missing field 'id' (the conversation id)")
    cid = json_id(src.path, src.line, "id", obj["id"])
    where = f"conversation {cid!r}: "
    block = _int_field(src, obj, where, "block_size", None, minimum=1)
    scope = obj.get("hash_id_scope", "local")
    if scope not in SCOPES:
        raise TraceFormatError(src.path, src.line, f"{where}hash_id_scope must be one of "
                               f"{', '.join(SCOPES)}, got {scope!r:.40}")
    _str_list(src, f"{where}models", obj.get("models"))
    # requests `workbench capture` recorded without their prefix (docs/capture.md): summed
    # into the workload's meta, so a replay's plan says how many it could not know
    counts["requests_prefix_unknown"] += _int_field(src, obj, where, "requests_prefix_unknown", 0)
    root = _Agent(cid, src.line, cid, "root", _int_field(src, obj, where, "tool_tokens", 0),
                  _int_field(src, obj, where, "system_tokens", 0))
    if "requests" not in obj:
        raise TraceFormatError(src.path, src.line, f"{where}missing field 'requests'")
    ids = _Ids(src, scope, namespace(cid))
    _agent(src, obj["requests"], where, root, block, ids, 0, seen, counts)
    if not _has_requests(root):
        raise TraceFormatError(src.path, src.line, f"{where}has no request (type 's' or "
                               "'n'), of its own or of a sub-agent; nothing to replay it by")
    if not any(isinstance(it, _Request) for it in root.items):
        # its sub-agents replay as sessions of their own (docs/weka-traces.md)
        counts["conversations_of_subagents_only"] += 1
    return root, block, ids


# -- hash ids ------------------------------------------------------------------------------


def namespace(conversation: str) -> int:
    """The 40-bit namespace of a conversation's local hash ids (a stable hash of its id)."""
    digest = hashlib.blake2b(conversation.encode(), digest_size=5, person=b"wb-weka").digest()
    return int.from_bytes(digest, "big")


class _Ids:
    """A conversation's hash ids as replayed, one int object per distinct id: local ids
    move into its namespace (``ns << 23 | id``, under 2^63 for numpy); global ones stay."""

    def __init__(self, src: _Source, scope: str, ns: int) -> None:
        self.src, self.scope = src, scope
        self.base = ns << _LOCAL_BITS
        self.memo: dict[int, int] = {}

    def __call__(self, where: str, hashes: list[int]) -> tuple[int, ...]:
        memo, get = self.memo, self.memo.get
        local = self.scope == "local"
        out = []
        for h in hashes:
            g = get(h)
            if g is None:
                if local and not 0 <= h < 1 << _LOCAL_BITS:
                    raise TraceFormatError(self.src.path, self.src.line, f"{where}hash_ids: "
                                           f"local id {h} is outside [0, 2^{_LOCAL_BITS})")
                g = memo[h] = self.base | h if local else h
            out.append(g)
        return tuple(out)

    def rebase(self, ns: int) -> dict[int, int]:
        """Old id → new id in namespace ``ns`` (a clash with an earlier conversation's)."""
        if self.scope != "local":
            return {}
        base = ns << _LOCAL_BITS
        return {g: base | h for h, g in self.memo.items()}


def _own_namespace(root: _Agent, ids: _Ids, spaces: dict[int, str],
                   counts: Counter[str]) -> None:  # fmt: skip
    """Move a conversation whose namespace an earlier one holds to the next free one
    (its ids rewritten; file order decides)."""
    if ids.scope != "local":
        return
    ns = ids.base >> _LOCAL_BITS
    if ns not in spaces:
        spaces[ns] = root.unit_id
        return
    while ns in spaces:
        ns = (ns + 1) % (1 << 40)
    spaces[ns] = root.unit_id
    counts["namespace_clashes"] += 1
    _rewrite(root, ids.rebase(ns))


def _rewrite(agent: _Agent, mapping: dict[int, int]) -> None:
    for i, it in enumerate(agent.items):
        if isinstance(it, _Request):
            agent.items[i] = dataclasses.replace(it, hashes=_remap(it.hashes, mapping, None))
        else:
            _rewrite(it[1], mapping)


def _warm_map(agent: _Agent, blocks: int, block: int, out: dict[int, int]) -> dict[int, int]:
    """The warm prefix: ids at positions below ``blocks`` of each agent's first prompt →
    the shared ids ``-1, -2, ...`` (an id names its block and all before it)."""
    first = next((it for it in agent.items if isinstance(it, _Request)), None)
    if first is not None:
        for i, h in enumerate(first.hashes[: min(blocks, first.prompt // block)]):
            out.setdefault(h, -(i + 1))
    for it in agent.items:
        if not isinstance(it, _Request):
            _warm_map(it[1], blocks, block, out)
    return out


def _remap(hashes: tuple[int, ...], mapping: dict[int, int], upto: int | None
           ) -> tuple[int, ...]:  # fmt: skip
    """``hashes`` with ``mapping`` applied to its first ``upto`` ids (all: None)."""
    head = hashes if upto is None else hashes[:upto]
    if not mapping or not any(h in mapping for h in head):
        return hashes
    get = mapping.get
    new = tuple(get(h, h) for h in head)
    return new if upto is None else new + hashes[upto:]


# -- units ---------------------------------------------------------------------------------


@dataclass
class _Built:
    """The units made so far (an agent before its sub-agents), the counts, and the block
    ids earlier rounds sent (a round's prefix is its leading blocks among them)."""

    units: list[Unit]
    counts: Counter[str]
    timing: Counter[str]
    block: int
    seen: set[int] = field(default_factory=set)


def _delay_s(prev: _Request | float, cur: _Request, opts: dict[str, Any],
             timing: Counter[str]) -> float:  # fmt: skip
    """The wait before ``cur`` after the item before it (a request, or a marker's ``t``)
    by the timing strategy; without its fields, ``original``."""
    prev_t = prev if isinstance(prev, float) else prev.t
    strategy = opts["timing"]
    if strategy == "think-only" and cur.think_time is not None:
        delay = cur.think_time
    elif (strategy == "api-scaled" and cur.think_time is not None
          and isinstance(prev, _Request) and prev.api_time is not None):
        delay = prev.api_time * opts["api_time_scale"] + cur.think_time
    else:
        strategy = "original"
        delay = max(0.0, cur.t - prev_t)
    timing[strategy] += 1
    cap = opts["max_delay_s"]
    if cap is not None and delay > cap:
        timing["capped"] += 1
        delay = float(cap)
    return delay


def _collapse(items: list[_Request | tuple[float, _Agent]], counts: Counter[str]
              ) -> list[_Request | tuple[float, _Agent]]:  # fmt: skip
    out: list[_Request | tuple[float, _Agent]] = []
    for it in items:
        last = out[-1] if out else None
        if (isinstance(it, _Request) and isinstance(last, _Request)
                and it.stream != last.stream and it.hashes == last.hashes):
            counts["collapsed_pairs"] += 1
            out[-1] = dataclasses.replace(
                last, stream=True, prompt=max(last.prompt, it.prompt),  # one of them streamed
                output=max(last.output, it.output),
                api_time=it.api_time if last.api_time is None else last.api_time)
            continue
        out.append(it)
    return out


def _units(src: _Source, agent: _Agent, warm: dict[int, int], warm_blocks: int,
           opts: dict[str, Any], built: _Built, spawn: Spawn | None) -> None:  # fmt: skip
    items = _collapse(agent.items, built.counts) if opts["pairs"] == "collapse" else agent.items
    reqs = [it for it in items if isinstance(it, _Request)]
    rounds: list[Round] = []
    children: list[tuple[_Agent, Spawn]] = []
    waits: list[float] = []
    prev: _Request | float | None = None
    for it in items:
        if isinstance(it, _Request):
            if prev is not None:
                waits.append(_delay_s(prev, it, opts, built.timing) * 1000.0)
            prev = it
            continue
        t, child = it
        k = len(waits) + (prev is not None)  # the requests before the marker
        if k == 0:
            built.counts["subagents_before_first_request"] += bool(reqs)  # (one to come)
            sp = Spawn(agent.unit_id, 0, "round_start", 0.0, None, agent.line)
        elif opts["subagents"] == "recorded":
            sp = _recorded_spawn(agent, reqs, k, t, child, built.counts)
        else:
            join = k if k < len(reqs) else None
            sp = Spawn(agent.unit_id, k - 1, "round_end", 0.0, join, agent.line)
        children.append((child, sp))
        if prev is not None:  # the next request's `original` delay counts from the marker
            prev = t
    for k, r in enumerate(reqs):
        hashes = _remap(r.hashes, warm, warm_blocks)
        prefix = min(leading_seen_blocks(hashes, built.seen) * built.block, r.prompt)
        built.seen.update(hashes)
        wait = waits[k] if k < len(waits) else 0.0
        if wait > bounds.MAX_WAIT_MS:
            raise TraceFormatError(src.path, src.line, bounds.over(
                f"{r.where}wait before the next request", wait, bounds.MAX_WAIT_MS, "ms"))
        if r.output < 1:
            built.counts["clamped_output_tokens"] += 1
        rounds.append(Round(f"{agent.unit_id}:{k}", agent.unit_id, k, 0.0, prefix,
                            r.prompt - prefix, max(r.output, 1), wait, hashes))
    models = sorted({r.model for r in reqs if r.model})
    meta = {"conversation": agent.conversation, "agent": agent.kind,
            "model": reqs[0].model if reqs else "", "models": models,
            "streamed_requests": sum(r.stream for r in reqs)}
    if spawn is not None:
        meta["parent_session_id"] = spawn.parent_id
    if rounds:
        built.units.append(Unit(agent.unit_id, "session", 0.0, tuple(rounds), meta, spawn))
    for child, sp in children:
        # an agent with markers only: its children hang off its parent (a root's start
        # with the conversation, nobody waiting)
        _units(src, child, warm, warm_blocks, opts, built, sp if rounds else spawn)


def _recorded_spawn(agent: _Agent, reqs: list[_Request], k: int, t: float, child: _Agent,
                    counts: Counter[str]) -> Spawn:  # fmt: skip
    """``subagents: recorded`` (docs/weka-traces.md): the child starts at its marker's
    offset from request ``k - 1``; the first request recorded after its end joins it."""
    before = reqs[k - 1]
    end = before.t + (before.api_time or 0.0)
    trigger: SpawnTrigger = "round_end"
    delay = t - end
    if t < end:
        trigger, delay = "round_start", max(0.0, t - before.t)
    done = child.recorded_end(t)
    join = next((j for j in range(k, len(reqs)) if reqs[j].t >= done), None)
    if join is None:
        counts["subagents_not_joined"] += 1
    return Spawn(agent.unit_id, k - 1, trigger, delay * 1000.0, join, agent.line)


# -- the reader ----------------------------------------------------------------------------


def _sniff(lines: list[str]) -> bool:
    """A conversation's keys in the head; a pretty-printed one shows only its first keys."""
    head = "\n".join(lines)
    if not head.lstrip().startswith(("{", "[")) or '"conversations"' in head:  # ShareGPT's
        return False
    if '"requests"' in head and '"block_size"' in head and (
            '"hash_ids"' in head or '"hash_id_scope"' in head or '"tool_tokens"' in head):
        return True
    pretty = lines[0].strip() in ("{", "[", "[{")
    return pretty and any(ln.lstrip().startswith(('"block_size"', '"hash_id_scope"',
                                                  '"tool_tokens"', '"models"', '"id"'))
                          for ln in lines[1:])


@register_format(FORMAT, sniff=_sniff, aliases=ALIASES, folders=SUFFIXES,
                 description="captured coding-agent conversations (kv-cache-tester / "
                             "AIPerf 'Weka' / AgentX JSON): a file, a JSONL or a folder")
def read_weka(path: Path, *, timing: str = "think-only", api_time_scale: float = 1.0,
              max_delay_s: float | None = None, warm_prefix_pct: float = 0.5,
              pairs: str = "keep", subagents: str = "wait") -> Workload:
    """Load captured conversations (module doc; docs/weka-traces.md)."""
    opts = _options({"timing": timing, "api_time_scale": api_time_scale,
                     "max_delay_s": max_delay_s, "warm_prefix_pct": warm_prefix_pct,
                     "pairs": pairs, "subagents": subagents})
    path = Path(path)
    seen: dict[str, int] = {}
    counts: Counter[str] = Counter()
    convs: list[tuple[_Source, _Agent, int, _Ids]] = []
    where_id: dict[str, _Source] = {}
    spaces: dict[int, str] = {}
    files = trace_files(path)
    for file in files:
        # only the agents are kept, not a file's JSON objects (a corpus is GBs of them)
        for src, obj in _sources(file):
            root, block, ids = _conversation(src, obj, seen, counts)
            if root.unit_id in where_id:
                first = where_id[root.unit_id]
                raise bounds.duplicate(src.path, src.line, "conversation id", root.unit_id,
                                       first.line if first.path == src.path
                                       else f"{first.path}:{first.line}")
            where_id[root.unit_id] = src
            _own_namespace(root, ids, spaces, counts)
            convs.append((src, root, block, ids))
    block = convs[0][2]
    for src, _root, b, _ in convs:
        if b != block:
            raise TraceFormatError(src.path, src.line, f"block_size {b} differs from {block} "
                                   f"({convs[0][0].path}:{convs[0][0].line}); replay needs one")
    shared = max(r.tool_tokens + r.system_tokens for _, r, _, _ in convs)
    warm_tokens = int(opts["warm_prefix_pct"] * shared)
    warm_blocks = warm_tokens // block
    built = _Built([], counts, Counter(), block)
    n_convs = len(convs)
    convs.reverse()
    while convs:  # each conversation's requests let go once its rounds hold their ids
        src, root, _, _ = convs.pop()
        warm = _warm_map(root, warm_blocks, block, {}) if warm_blocks else {}
        _units(src, root, warm, warm_blocks, opts, built, None)
    units = built.units
    meta: dict[str, Any] = {
        "reader": {**opts, "warm_prefix_tokens": warm_tokens, "files": len(files)},
        "conversations": n_convs,
        "subagents": sum(u.spawn is not None for u in units),
        "timing_sources": dict(built.timing),
        **{k: v for k, v in counts.items() if v},
    }
    warn_unknown(path, seen, meta)
    return Workload(tuple(units), FORMAT, str(path), block, meta)


__all__ = ["FORMAT", "PAIRS", "SUBAGENTS", "TIMINGS", "namespace", "read_weka",
           "trace_files"]
