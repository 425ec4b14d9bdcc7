"""``workbench capture`` in front of the real embedded engine, a scripted agent through it.

Three sessions of four rounds (one non-streaming), real tool waits of 20–50 ms, one
sub-agent spawned by ``alpha`` in its tool wait; the capture must hold the right
conversations, rounds, counts (the engine's usage), sub-agent marker, think times, hash
chains — and neither the prompts' text nor the API key (docs/capture.md).

The proxy's times are checked against the script's own stamps of the same requests
(``scripted_agent.arrival_gap_bounds``, ``think_bounds``): bounds that hold on a loaded
machine, where a fixed 10 ms tolerance did not.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from capture_process import capture_process
from scripted_agent import API_KEY, MARKERS, SLACK_S, Script, arrival_gap_bounds, think_bounds

from workbench.capture import CaptureProxy, read_capture
from workbench.sim.process import serve_sim_process

FAST_ENGINE = {"speedup": 50.0}


def _flat(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["type"] != "subagent"]


async def test_scripted_agents_through_the_proxy(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    out = tmp_path / "capture"
    script = Script()
    # `workbench capture` in front of the engine, each in a process of its own as a user
    # runs them: the script's loop shares no CPU time with theirs (times compared below)
    async with serve_sim_process(**FAST_ENGINE) as sim, \
            capture_process(sim.base_url, out) as proxy:  # fmt: skip
        sent = await script.run(proxy.url)
    assert proxy.returncode == 0, proxy.console
    docs = read_capture(out)
    assert len(docs) == 3, [d["id"] for d in docs]
    assert len(sent) == 3 * 4 + 2
    assert f"captured {len(sent)} requests" in proxy.console
    assert API_KEY not in proxy.console and MARKERS[0] not in proxy.console

    # nothing of the prompts' text, nothing of the key, in any file or log line
    for path in out.rglob("*"):
        data = path.read_bytes() if path.is_file() else b""
        for word in (*MARKERS, "word1", API_KEY, "capturetest"):
            assert word.encode() not in data, (path, word)
    assert all(w not in caplog.text for w in (*MARKERS, API_KEY))
    assert sorted(p.name for p in out.iterdir()) == [f"{d['id']}.json" for d in docs]

    for doc in docs:
        assert doc["block_size"] == 64 and doc["hash_id_scope"] == "local"
        assert doc["models"] == ["workbench-sim"]
        first = _flat(doc["requests"])[0]
        assert first["t"] == 0.0 and first["think_time"] == 0.0
    # which file is which session: alpha's has the sub-agent, beta's does not stream
    # (the three sessions' prompts have equal lengths, so counts cannot tell them apart)
    def session_of(doc: dict) -> str:
        if any(r["type"] == "subagent" for r in doc["requests"]):
            return "alpha"
        return "beta" if doc["requests"][0]["type"] == "n" else "gamma"

    sessions = {}
    for doc in docs:
        name = session_of(doc)
        rows = sorted((s for s in sent if s.session == name and s.agent == "main"),
                      key=lambda s: s.round)
        sessions[name] = (doc, rows)
    assert sorted(sessions) == sorted(script.sessions)

    for name, (doc, rows) in sessions.items():
        mains = _flat(doc["requests"])
        assert len(mains) == script.rounds
        for k, (req, row) in enumerate(zip(mains, rows, strict=True)):
            assert req["in"] == row.prompt_tokens and req["out"] == row.completion_tokens
            assert req["type"] == ("s" if row.stream else "n")
            assert req["model"] == "workbench-sim"
            assert req["stop"] == "max_tokens"  # the engine's output is pinned: "length"
            assert req["output_types"] == ["text"]
            assert req["input_types"] == (["text"] if k == 0 else ["tool_result"])
            assert len(req["hash_ids"]) == req["in"] // 64
            assert req["api_time"] > 0
            if k:  # each round extends the last: its blocks start with the last's
                prev = mains[k - 1]["hash_ids"]
                assert req["hash_ids"][: len(prev)] == prev
                # t: the last request's t + its api_time + this think time (the proxy's
                # clock), to the file's rounding
                last = mains[k - 1]
                assert req["t"] == pytest.approx(last["t"] + last["api_time"]
                                                 + req["think_time"], abs=SLACK_S)
                # against the script's stamps of the same requests
                lo, hi = arrival_gap_bounds(rows[0], row)
                assert lo <= req["t"] <= hi, (name, k, lo, req["t"], hi)
                lo, hi = think_bounds(rows[k - 1], row, last["api_time"])
                assert lo <= req["think_time"] <= hi, (name, k, lo, req["think_time"], hi)
        # ids are the file's own, numbered in first-seen order
        seen = [i for r in mains for i in r["hash_ids"]]
        assert sorted(set(seen)) == list(range(1, len(set(seen)) + 1))
        assert seen[0] == 1

    # the sub-agent: a marker in alpha's list, between its rounds 1 and 2 (0-based)
    alpha, alpha_rows = sessions["alpha"]
    kinds = [r["type"] for r in alpha["requests"]]
    markers = [r for r in alpha["requests"] if r["type"] == "subagent"]
    assert len(markers) == 1 and kinds.index("subagent") == script.spawn_after
    marker = markers[0]
    subs = sorted((s for s in sent if s.agent == "sub"), key=lambda s: s.round)
    assert marker["agent_id"] == "agent_001" and marker["status"] == "completed"
    assert marker["models"] == ["workbench-sim"]
    alpha_mains = _flat(alpha["requests"])
    lo, hi = arrival_gap_bounds(alpha_rows[1], subs[0])
    assert lo <= marker["t"] - alpha_mains[1]["t"] <= hi
    sub_reqs = marker["requests"]
    assert [r["in"] for r in sub_reqs] == [s.prompt_tokens for s in subs]
    assert [r["out"] for r in sub_reqs] == [s.completion_tokens for s in subs]
    assert sub_reqs[0]["t"] == 0.0 and sub_reqs[0]["think_time"] == 0.0
    assert sub_reqs[1]["t"] == pytest.approx(sub_reqs[0]["api_time"]
                                             + sub_reqs[1]["think_time"], abs=SLACK_S)
    lo, hi = think_bounds(subs[0], subs[1], sub_reqs[0]["api_time"])
    assert lo <= sub_reqs[1]["think_time"] <= hi, (lo, sub_reqs[1]["think_time"], hi)
    # its duration: from its first request's arrival to its last response's end (whole ms)
    end_s = sub_reqs[-1]["t"] + sub_reqs[-1]["api_time"]
    assert abs(marker["duration_ms"] - end_s * 1000) <= 0.5 + SLACK_S * 1000
    assert sub_reqs[1]["hash_ids"][: len(sub_reqs[0]["hash_ids"])] == sub_reqs[0]["hash_ids"]
    # its own system prompt: no block shared with its parent
    parent_ids = {i for r in _flat(alpha["requests"]) for i in r["hash_ids"]}
    assert not parent_ids & {i for r in sub_reqs for i in r["hash_ids"]}
    # alpha's round after the spawn waited for the sub-agent: its think time (the proxy's
    # clock, as the marker's times) covers the sub-agent's whole span
    before, after = alpha_mains[script.spawn_after - 1], alpha_mains[script.spawn_after]
    assert before["t"] + before["api_time"] <= marker["t"] + SLACK_S
    assert marker["t"] + end_s <= after["t"] + SLACK_S
    assert after["think_time"] >= end_s - SLACK_S


async def test_sessions_without_a_header_follow_the_message_prefix(sim, tmp_path: Path) -> None:
    """No session header: two agents interleaved round by round still make two files,
    each round joined to its agent by the messages it extends."""
    out = tmp_path / "capture"
    script = Script(sessions=("delta", "epsilon"), rounds=3, spawn_after=-1,
                    header="X-Not-A-Session-Header")
    async with CaptureProxy(sim.base_url, out) as proxy:
        sent = await script.run(proxy.url)
    docs = read_capture(out)
    assert len(docs) == 2
    for doc in docs:
        reqs = doc["requests"]
        assert [r["type"] for r in reqs] == ["s"] * 3 or [r["type"] for r in reqs] == ["n"] * 3
        name = "delta" if reqs[0]["type"] == "s" else "epsilon"
        rows = sorted((s for s in sent if s.session == name), key=lambda s: s.round)
        assert [r["in"] for r in reqs] == [s.prompt_tokens for s in rows]
    assert proxy.captured == 6
