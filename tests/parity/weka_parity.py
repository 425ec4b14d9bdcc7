"""Both tools on the same Weka files against the embedded engine: what each sent, and the rules.

Read by ``test_aiperf_weka.py`` and by hand (``python tests/parity/weka_parity.py``, which
prints the table of docs/aiperf-parity.md). Nothing here depends on AIPerf's code: its
requests are seen from the server's side (the engine's ``GET /debug/requests``, one row per
request with prompt, cached and completion tokens, arrival and finish), joined to AIPerf's
``profile_export.jsonl`` by the ``x-request-id`` header AIPerf sends, which names the
conversation and the turn. The Weka files are read here as raw JSON: the rules below say
what each tool should have sent, from the file alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "aiperf.sh"
FIXTURES = REPO / "tests" / "fixtures" / "weka-parity"
# one file with four sub-agents (two of them outlive the parent's next request), one with
# two sub-agents late in a long session, two small ones (s/n requests, no sub-agents)
FILES = ("trace_0277.json", "trace_0291.json", "trace_0504.json", "trace_0187.json")
BLOCK = 64  # the files' block_size, and the engine's, so cached tokens count whole blocks
JOIN_EPSILON_S = 1e-6
TOOL_TIMEOUT_S = 240.0  # one replay of the four files: ~15 s (AIPerf), ~5 s (workbench)

Conv = tuple[str, str | None]  # (trace id, sub-agent id; None: the parent)


# -- the files ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    """One recorded request: what a replay should send (``in``, ``out``, ``hash_ids``)."""

    t: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    api_time: float | None


@dataclass(frozen=True)
class SubAgent:
    agent_id: str
    marker: int  # position of the marker among the file's entries
    spawn_after: int | None  # index of the last parent request before the marker
    start_t: float
    end_t: float  # recorded end: t + duration_ms, else the last inner request's end
    requests: tuple[Req, ...]


@dataclass(frozen=True)
class WekaFile:
    trace_id: str
    parent: tuple[Req, ...]
    parent_markers: tuple[int, ...]  # entry position of each parent request
    subagents: tuple[SubAgent, ...]
    # agent (None: the parent) -> tool_tokens + system_tokens its file declares: AIPerf
    # sends a system message on a first request only when there is such a prefix
    declared: dict[str | None, int] = field(default_factory=dict)

    def requests(self, agent: str | None) -> tuple[Req, ...]:
        if agent is None:
            return self.parent
        return next(sa.requests for sa in self.subagents if sa.agent_id == agent)

    def workbench_join(self, sa: SubAgent) -> int | None:
        """Workbench: the parent request right after the marker waits for the sub-agent (a
        marker before the parent's first request starts with it, and nobody waits)."""
        if sa.spawn_after is None:
            return None
        nxt = sa.spawn_after + 1
        return nxt if nxt < len(self.parent) else None

    def aiperf_join(self, sa: SubAgent) -> int | None:
        """AIPerf: the first later parent request recorded at or after the sub-agent's end."""
        for k, pos in enumerate(self.parent_markers):
            if pos > sa.marker and self.parent[k].t + JOIN_EPSILON_S >= sa.end_t:
                return k
        return None


def _req(raw: dict, offset: float = 0.0) -> Req:
    t = float(raw["t"])
    return Req(offset + t, int(raw["in"]), int(raw["out"]), tuple(raw["hash_ids"]),
               raw.get("api_time"))  # fmt: skip


def read_weka(path: Path) -> WekaFile:
    data = json.loads(path.read_text())
    declared: dict[str | None, int] = {
        None: int(data.get("tool_tokens") or 0) + int(data.get("system_tokens") or 0)}
    parent: list[Req] = []
    markers: list[int] = []
    subagents: list[SubAgent] = []
    for pos, raw in enumerate(data["requests"]):
        if raw["type"] != "subagent":
            parent.append(_req(raw))
            markers.append(pos)
            continue
        start = float(raw["t"])
        # inner t: relative to the marker (older files) or absolute (newer): a t before the
        # marker's can only be relative
        inner = [_req(r, start if float(r["t"]) + JOIN_EPSILON_S < start else 0.0)
                 for r in raw["requests"]]  # fmt: skip
        if raw.get("duration_ms") is not None:
            end = start + max(float(raw["duration_ms"]) / 1000.0, 0.0)
        else:
            end = max((r.t + max(r.api_time or 0.0, 0.0) for r in inner), default=start)
        subagents.append(SubAgent(str(raw["agent_id"]), pos, len(parent) - 1 if parent else None,
                                  start, end, tuple(inner)))  # fmt: skip
        declared[str(raw["agent_id"])] = (int(raw.get("tool_tokens") or 0)
                                          + int(raw.get("system_tokens") or 0))
    return WekaFile(str(data["id"]), tuple(parent), tuple(markers), tuple(subagents),
                    declared)


# -- what the server saw -----------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One request as the embedded engine saw it."""

    conv: Conv
    index: int  # position in its conversation
    prompt_tokens: int
    max_tokens: int
    completion_tokens: int
    cached_tokens: int
    arrival_ns: int
    finish_ns: int


@dataclass
class Run:
    tool: str
    sent: list[Sent]
    by_conv: dict[Conv, list[Sent]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_conv = defaultdict(list)
        for s in sorted(self.sent, key=lambda s: (s.conv[0], s.conv[1] or "", s.index)):
            self.by_conv[s.conv].append(s)


def debug_rows(base_url: str) -> dict[str, dict]:
    """The engine's per-request truth, by request id (``GET /debug/requests``)."""
    with urllib.request.urlopen(f"{base_url}/debug/requests", timeout=30) as resp:
        rows = json.load(resp)
    return {str(r["request_id"]): r for r in rows}


def _sent(conv: Conv, index: int, row: dict) -> Sent:
    return Sent(conv, index, int(row["prompt_tokens"]), int(row["max_tokens"]),
                int(row["completion_tokens"]), int(row["cached_tokens"]),
                int(row["arrival_ns"]), int(row["finish_ns"]))  # fmt: skip


def aiperf_conv(conversation_id: str) -> Conv:
    """AIPerf's conversation ids: ``trace_0277`` (parent), ``trace_0277::sa:agent_001``."""
    trace, _, agent = conversation_id.partition("::sa:")
    return trace, agent or None


def read_aiperf(out_dir: Path, rows: dict[str, dict]) -> Run:
    """AIPerf's records (``profile_export.jsonl``) joined to the engine's rows."""
    sent = []
    with open(out_dir / "profile_export.jsonl") as fh:
        for line in fh:
            meta = json.loads(line)["metadata"]
            row = rows[meta["x_request_id"]]
            sent.append(_sent(aiperf_conv(meta["conversation_id"]), int(meta["turn_index"]), row))
    return Run("aiperf", sent)


async def _run(argv: list[str], log: Path, what: str) -> None:
    """Run ``argv`` (its own process group) to its end within ``TOOL_TIMEOUT_S``, output
    in ``log``; ``RuntimeError`` with the log's tail if it fails."""
    with open(log, "wb") as fh:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=fh, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
        try:
            code = await asyncio.wait_for(proc.wait(), TOOL_TIMEOUT_S)
        except TimeoutError:
            code = None
        finally:
            if proc.returncode is None:  # AIPerf's services are its process group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        why = f"did not end within {TOOL_TIMEOUT_S:.0f} s" if code is None else f"exit {code}"
        raise RuntimeError(f"{what} {why}:\n{tail}")


async def run_aiperf(base_url: str, inputs: Path, out_dir: Path) -> None:
    """``scripts/aiperf.sh weka``: AIPerf's replay of the folder ``inputs`` (artifacts and
    ``profile_export.jsonl`` in ``out_dir``, its output in ``out_dir``.log)."""
    argv = ["bash", str(SCRIPT), "weka", base_url, str(inputs), str(out_dir)]
    await _run(argv, out_dir.with_suffix(".log"), "aiperf")


async def run_workbench(base_url: str, inputs: Path, out_dir: Path, *options: str) -> Path:
    """``workbench replay`` of the folder ``inputs`` as AIPerf replays it: every root at
    once, no waits, token-id prompts (``openai``), with reader ``options`` (``KEY=VALUE``,
    ``--trace-option``); its run directory."""
    argv = [sys.executable, "-m", "workbench", "replay", "--trace", str(inputs),
            "--format", "weka", "--target", base_url, "--arrival", "saturated",
            "--tool-wait-scale", "0", "--no-progress", "-o", str(out_dir)]  # fmt: skip
    for opt in options:
        argv += ["--trace-option", opt]
    await _run(argv, out_dir.with_suffix(".log"), "workbench replay")
    (run_dir,) = [p for p in out_dir.iterdir() if (p / "records.jsonl").is_file()]
    return run_dir


def read_workbench(run_dir: Path, rows: dict[str, dict]) -> Run:
    """Workbench's records (``records.jsonl``: unit id ``trace_0277::sa:agent_001``, as
    AIPerf's conversation ids) joined to the engine's rows by request id."""
    sent = []
    with open(run_dir / "records.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            row = rows[str(rec["request_id"])]
            sent.append(_sent(aiperf_conv(str(rec["session_id"])), int(rec["round_idx"]), row))
    return Run("workbench", sent)


# -- the rules ---------------------------------------------------------------------------------


def ideal_cached(files: dict[str, WekaFile], run: Run) -> dict[tuple[Conv, int], int]:
    """Per request, the tokens of its leading blocks whose hash id an earlier request of the
    same file sent (``hash_id_scope: local``), in the order the server received them;
    at most ``in - 1`` (an engine recomputes a prompt's last token)."""
    seen: dict[str, set[int]] = defaultdict(set)
    out: dict[tuple[Conv, int], int] = {}
    for s in sorted(run.sent, key=lambda s: s.arrival_ns):
        req = files[s.conv[0]].requests(s.conv[1])[s.index]
        scope = seen[s.conv[0]]
        n = 0
        for h in req.hash_ids:
            if h not in scope:
                break
            n += 1
        scope.update(req.hash_ids)
        out[(s.conv, s.index)] = min(n * BLOCK, req.input_tokens - 1)
    return out


def template_messages(extra_tokens: int) -> int | None:
    """Messages of a chat request whose prompt is ``extra_tokens`` over its content: the
    engine's chat template adds 2 per message and 1 (``<|role|> … <|end|>`` each, then
    ``<|assistant|>``; workbench/sim/wire.py ``chat_prompt``); None when that is not odd."""
    if extra_tokens < 3 or extra_tokens % 2 == 0:
        return None
    return (extra_tokens - 1) // 2


def expected_convs(files: dict[str, WekaFile], tool: str) -> dict[Conv, int]:
    """Requests per conversation each tool sends: every request of the file; AIPerf drops a
    sub-agent whose marker comes before the parent's first request (nothing spawns it)."""
    out: dict[Conv, int] = {}
    for f in files.values():
        out[(f.trace_id, None)] = len(f.parent)
        for sa in f.subagents:
            if tool == "aiperf" and sa.spawn_after is None:
                continue
            out[(f.trace_id, sa.agent_id)] = len(sa.requests)
    return out


def check_counts(files: dict[str, WekaFile], run: Run) -> list[str]:
    want = expected_convs(files, run.tool)
    got = {conv: len(sent) for conv, sent in run.by_conv.items()}
    bad = [f"{conv}: {got.get(conv, 0)} requests, the file has {n}"
           for conv, n in want.items() if got.get(conv, 0) != n]  # fmt: skip
    bad += [f"{conv}: not in the files" for conv in got if conv not in want]
    for conv, sent in run.by_conv.items():
        if [s.index for s in sent] != list(range(len(sent))):
            bad.append(f"{conv}: turn indexes {[s.index for s in sent]}")
    return bad


def check_tokens(files: dict[str, WekaFile], run: Run) -> list[str]:
    """Per request: output tokens = ``out`` (≥ 1); prompt = ``in`` for workbench (token ids),
    ``in`` + the chat template for AIPerf (2 per message + 1; on a first request 2 messages,
    system and user, when the file declares tool or system tokens, else the user's alone);
    the message count never falls within a conversation without a drop in ``in`` (a
    compaction restarts the conversation)."""
    bad = []
    for conv, sent in run.by_conv.items():
        reqs = files[conv[0]].requests(conv[1])
        first_messages = 2 if files[conv[0]].declared.get(conv[1], 0) > 0 else 1
        last_messages = 0
        for s in sent:
            req = reqs[s.index]
            out = max(req.output_tokens, 1)
            if s.max_tokens != out or s.completion_tokens != out:
                bad.append(f"{conv}[{s.index}]: max_tokens {s.max_tokens}, completion "
                           f"{s.completion_tokens}, out {req.output_tokens}")  # fmt: skip
            extra = s.prompt_tokens - req.input_tokens
            if run.tool == "workbench":
                if extra:
                    bad.append(f"{conv}[{s.index}]: prompt {s.prompt_tokens} != in "
                               f"{req.input_tokens}")  # fmt: skip
                continue
            messages = template_messages(extra)
            prev_in = reqs[s.index - 1].input_tokens if s.index else 0
            if (
                messages is None
                or (s.index == 0 and messages != first_messages)
                or (messages < last_messages and req.input_tokens >= prev_in)
            ):
                bad.append(f"{conv}[{s.index}]: prompt {s.prompt_tokens} = in "
                           f"{req.input_tokens} + {extra}: not a chat template's overhead "
                           f"(after {last_messages} messages)")  # fmt: skip
            last_messages = messages or 0
    return bad


def concurrent_first_requests(files: dict[str, WekaFile], run: Run) -> set[Conv]:
    """Sub-agents whose first request reached the engine while a sibling's first request of
    the same file was still being answered: they may find a shared prefix only partly
    computed, so their cached tokens are bounded by the ideal, not equal to it."""
    firsts = [(conv, sent[0]) for conv, sent in run.by_conv.items() if conv[1] is not None]
    out: set[Conv] = set()
    for conv, s in firsts:
        for other, o in firsts:
            if (
                other != conv
                and other[0] == conv[0]
                and (o.arrival_ns <= s.arrival_ns < o.finish_ns)
            ):
                out.add(conv)
    return out


def check_cached(files: dict[str, WekaFile], run: Run, slack: int = BLOCK) -> list[str]:
    """Cached tokens = the ideal of ``ideal_cached`` (workbench), or up to ``slack`` more
    (AIPerf: the chat template's role tokens lengthen the common prefix of two turns by a
    few tokens, which may complete one more engine block); at most the ideal for a
    sub-agent's first request that raced a sibling's."""
    ideal = ideal_cached(files, run)
    racing = concurrent_first_requests(files, run)
    bad = []
    for conv, sent in run.by_conv.items():
        for s in sent:
            want = ideal[(conv, s.index)]
            if s.index == 0 and conv in racing:
                ok = 0 <= s.cached_tokens <= want + slack
            elif run.tool == "workbench":
                ok = s.cached_tokens == want
            else:
                ok = want <= s.cached_tokens <= want + slack
            if not ok:
                bad.append(f"{conv}[{s.index}]: cached {s.cached_tokens}, ideal {want}")
    return bad


def check_order(files: dict[str, WekaFile], run: Run) -> list[str]:
    """Each sub-agent's first request reaches the engine after its spawning parent request
    ended; the parent request that joins it (the tool's rule) arrives after its last
    request ended."""
    bad = []
    for f in files.values():
        parent = run.by_conv.get((f.trace_id, None), [])
        for sa in f.subagents:
            child = run.by_conv.get((f.trace_id, sa.agent_id))
            if not child:
                continue
            if sa.spawn_after is not None and parent:
                spawner = parent[sa.spawn_after]
                if child[0].arrival_ns < spawner.finish_ns:
                    bad.append(f"{sa.agent_id} of {f.trace_id} started before parent request "
                               f"{sa.spawn_after} ended")  # fmt: skip
            join = f.aiperf_join(sa) if run.tool == "aiperf" else f.workbench_join(sa)
            if join is not None and join < len(parent):
                end = max(s.finish_ns for s in child)
                if parent[join].arrival_ns < end:
                    bad.append(f"parent request {join} of {f.trace_id} did not wait for "
                               f"{sa.agent_id}")  # fmt: skip
    return bad


def joins(files: dict[str, WekaFile]) -> Iterator[tuple[str, SubAgent, int | None, int | None]]:
    for f in files.values():
        for sa in f.subagents:
            yield f.trace_id, sa, f.workbench_join(sa), f.aiperf_join(sa)


def load_files(folder: Path, names: Iterable[str] = FILES) -> dict[str, WekaFile]:
    files = [read_weka(folder / n) for n in names]
    return {f.trace_id: f for f in files}


# -- the two runs side by side -----------------------------------------------------------------


def check_pair(files: dict[str, WekaFile], aiperf: Run, wb: Run, slack: int = BLOCK) -> list[str]:
    """Request by request: the same conversations and turns; the same output tokens; AIPerf's
    prompt = workbench's + the chat template (odd, ≥ 5); cached tokens within ``slack`` of
    each other, except a sub-agent's first request that raced a sibling's in either run."""
    bad = []
    if set(aiperf.by_conv) != set(wb.by_conv):
        bad.append(f"conversations differ: {set(aiperf.by_conv) ^ set(wb.by_conv)}")
    racing = concurrent_first_requests(files, aiperf) | concurrent_first_requests(files, wb)
    for conv in sorted(set(aiperf.by_conv) & set(wb.by_conv), key=str):
        a_sent, w_sent = aiperf.by_conv[conv], wb.by_conv[conv]
        if len(a_sent) != len(w_sent):
            bad.append(f"{conv}: {len(a_sent)} requests (aiperf), {len(w_sent)} (workbench)")
            continue
        for a, w in zip(a_sent, w_sent, strict=True):
            where = f"{conv}[{a.index}]"
            if a.completion_tokens != w.completion_tokens or a.max_tokens != w.max_tokens:
                bad.append(f"{where}: output {a.completion_tokens} vs {w.completion_tokens}")
            if template_messages(a.prompt_tokens - w.prompt_tokens) is None:
                bad.append(f"{where}: prompt {a.prompt_tokens} vs {w.prompt_tokens}")
            if (
                not (a.index == 0 and conv in racing)
                and abs(a.cached_tokens - w.cached_tokens) > slack
            ):
                bad.append(f"{where}: cached {a.cached_tokens} vs {w.cached_tokens}")
    return bad


def _after(parent: list[Sent], ns: int) -> int | None:
    """Index of the parent's first request that reached the engine at or after ``ns``."""
    return next((p.index for p in parent if p.arrival_ns >= ns), None)


def subagent_rows(files: dict[str, WekaFile], runs: list[Run]) -> list[list[str]]:
    """Per sub-agent: its spawning parent request, each tool's join rule, and what each run
    shows: the first parent request after its end, and its start after the spawner's end."""
    rows = []
    for trace, sa, wb_join, ap_join in joins(files):
        row = [f"{trace} {sa.agent_id}", str(len(sa.requests)), str(sa.spawn_after),
               f"{sa.start_t:.0f}-{sa.end_t:.0f} s", str(wb_join), str(ap_join)]  # fmt: skip
        for run in runs:
            parent, child = run.by_conv.get((trace, None), []), run.by_conv[(trace, sa.agent_id)]
            end = max(s.finish_ns for s in child)
            if sa.spawn_after is None:  # started with the parent's first request
                row.append(f"{_after(parent, end)}")
                continue
            start_ms = (child[0].arrival_ns - parent[sa.spawn_after].finish_ns) / 1e6
            row.append(f"{_after(parent, end)} (+{start_ms:.0f} ms)")
        rows.append(row)
    return rows


def conversation_rows(files: dict[str, WekaFile], runs: list[Run]) -> list[list[str]]:
    """Per conversation: requests, then per run prompt, output and cached tokens summed."""
    rows = []
    for conv in sorted(runs[0].by_conv, key=lambda c: (c[0], c[1] or "")):
        reqs = files[conv[0]].requests(conv[1])
        row = [f"{conv[0]} {conv[1] or '(parent)'}", str(len(reqs)),
               f"{sum(r.input_tokens for r in reqs):,}",
               f"{sum(max(r.output_tokens, 1) for r in reqs):,}"]  # fmt: skip
        for run in runs:
            sent = run.by_conv[conv]
            row += [f"{sum(s.prompt_tokens for s in sent):,}",
                    f"{sum(s.completion_tokens for s in sent):,}",
                    f"{sum(s.cached_tokens for s in sent):,}"]  # fmt: skip
        rows.append(row)
    return rows


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


async def _measure(tmp: Path) -> None:
    from workbench.sim.process import serve_sim_process

    files = load_files(FIXTURES)
    inputs = tmp / "weka"
    inputs.mkdir()
    for name in FILES:
        (inputs / name).write_bytes((FIXTURES / name).read_bytes())
    runs: list[Run] = []
    for tool, options in (("aiperf", ()), ("workbench", ("warm_prefix_pct=0",)),
                          ("workbench", ())):  # fmt: skip
        async with serve_sim_process(block_size=BLOCK, zero_cost=True) as sim:
            out = tmp / f"{tool}{len(runs)}"
            if tool == "aiperf":
                await run_aiperf(sim.base_url, inputs, out)
                runs.append(read_aiperf(out, debug_rows(sim.base_url)))
            else:
                run_dir = await run_workbench(sim.base_url, inputs, out, *options)
                runs.append(read_workbench(run_dir, debug_rows(sim.base_url)))
    names = ["AIPerf", "workbench warm 0", "workbench default"]
    head = ["conversation", "requests", "in", "out"]
    for n in names:
        head += [f"{n} prompt", f"{n} output", f"{n} cached"]
    print(_table(head, conversation_rows(files, runs)))
    total = ["total", str(len(runs[0].sent)), "", ""]
    for run in runs:
        total += [f"{sum(s.prompt_tokens for s in run.sent):,}",
                  f"{sum(s.completion_tokens for s in run.sent):,}",
                  f"{sum(s.cached_tokens for s in run.sent):,}"]  # fmt: skip
    print("| " + " | ".join(total) + " |\n")
    for n, run in zip(names, runs, strict=True):
        print(f"{n}: ideal cached {sum(ideal_cached(files, run).values()):,}; "
              f"rules: {[c(files, run) for c in (check_counts, check_tokens, check_order)]}; "
              f"cached: {check_cached(files, run)}")  # fmt: skip
    print("pair (AIPerf, workbench warm 0):", check_pair(files, runs[0], runs[1]))
    head = [
        "sub-agent",
        "requests",
        "spawned after parent request",
        "recorded span",
        "joined by (workbench)",
        "joined by (AIPerf)",
    ]
    head += [f"{n}: first parent request after its end (start after spawner's end)"
             for n in names[:2]]  # fmt: skip
    print(_table(head, subagent_rows(files, runs[:2])))


if __name__ == "__main__":  # the tables of docs/aiperf-parity.md
    import tempfile

    with tempfile.TemporaryDirectory(prefix="weka-parity-") as tmp:
        asyncio.run(_measure(Path(tmp)))
