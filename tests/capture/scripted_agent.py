"""A small scripted coding agent for the capture tests: sessions of rounds, tool waits,
one sub-agent, through any base URL (the capture proxy, or the engine directly).

Each round's messages extend the last round's with the assistant's reply and a tool
result; between rounds the agent "runs a tool" for a fixed 20–50 ms. Session ``alpha``
spawns a sub-agent after its second round and waits for it (the sub-agent's two rounds
run inside alpha's tool wait). Every prompt carries distinctive marker words (``MARKERS``)
and every request the API key ``API_KEY``, so a test can grep the capture for both.
What the agent saw (usage, times) is returned as ``Sent`` rows.

The proxy's times are compared with the script's own stamps of the same events, never
with a fixed tolerance (``arrival_gap_bounds``, ``think_bounds``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

API_KEY = "sk-capturetest-7f3a9c1e5b2d4680"
MARKERS = ("quixotrombone", "zephyrlantern", "marzipanvortex", "obsidianpelican")
#: tool waits in ms, round by round (per session: a rotation of these)
WAITS_MS = (20, 35, 50, 27, 44, 31)


@dataclass
class Sent:
    """One request as the agent saw it."""

    session: str
    agent: str  # "main" or "sub"
    round: int
    stream: bool
    sent: float  # monotonic s, just before the request
    ended: float  # monotonic s, after the last byte was read
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # the engine's prefix-cache hit


@dataclass
class Script:
    sessions: tuple[str, ...] = ("alpha", "beta", "gamma")
    rounds: int = 4
    sub_rounds: int = 2
    spawn_after: int = 2  # alpha's round after whose response the sub-agent runs
    max_tokens: int = 12
    header: str = "X-Session-ID"
    system_words: int = 150
    sent: list[Sent] = field(default_factory=list)

    def system(self, session: str, agent: str) -> str:
        words = " ".join(f"{session}{agent}word{k}" for k in range(self.system_words))
        return f"You are the {agent} agent of {session} {MARKERS[0]} {words}"

    async def run(self, base_url: str) -> list[Sent]:
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(*(self._session(http, base_url, s, k)
                                   for k, s in enumerate(self.sessions)))
        return self.sent

    async def _post(self, http: aiohttp.ClientSession, url: str, session: str, agent: str,
                    rnd: int, messages: list[dict[str, Any]], stream: bool) -> str:
        body: dict[str, Any] = {"model": "workbench-sim", "messages": messages,
                                "max_tokens": self.max_tokens, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        headers = {"Authorization": f"Bearer {API_KEY}", self.header: session,
                   "Content-Type": "application/json"}
        t0 = time.monotonic()
        async with http.post(f"{url}/v1/chat/completions", data=orjson.dumps(body),
                             headers=headers) as resp:
            raw = await resp.read()
            assert resp.status == 200, raw[:500]
        t1 = time.monotonic()
        text, usage = _read(raw, stream)
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        self.sent.append(Sent(session, agent, rnd, stream, t0, t1, usage["prompt_tokens"],
                              usage["completion_tokens"], cached))
        return text

    async def _session(self, http: aiohttp.ClientSession, url: str, session: str,
                       index: int) -> None:
        stream = index != 1  # beta does not stream
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system(session, "main")},
            {"role": "user", "content": f"Fix the {MARKERS[1]} bug in {session}'s code"},
        ]
        for rnd in range(self.rounds):
            reply = await self._post(http, url, session, "main", rnd, messages, stream)
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "tool", "tool_call_id": f"call_{rnd}",
                             "content": f"{MARKERS[2]} output of tool run {rnd} for {session}"})
            wait_ms = WAITS_MS[(index + rnd) % len(WAITS_MS)]
            t = time.monotonic()
            if session == self.sessions[0] and rnd + 1 == self.spawn_after:
                await self._sub_agent(http, url, session)  # inside the tool call
            rest = wait_ms / 1000 - (time.monotonic() - t)
            if rest > 0:
                await asyncio.sleep(rest)

    async def _sub_agent(self, http: aiohttp.ClientSession, url: str, session: str) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system(session, "sub")},
            {"role": "user", "content": f"Explore the {MARKERS[3]} module"},
        ]
        for rnd in range(self.sub_rounds):
            reply = await self._post(http, url, session, "sub", rnd, messages, True)
            messages.append({"role": "assistant", "content": reply})
            messages.append({"role": "tool", "tool_call_id": f"sub_{rnd}",
                             "content": f"{MARKERS[3]} listing {rnd}"})
            if rnd + 1 < self.sub_rounds:
                await asyncio.sleep(0.025)


#: a capture file's times have six decimals: each a rounding of up to 0.5 µs
ROUNDING_S = 1e-6
#: up to four rounded times in one comparison (``t(k) = t(k−1) + api_time + think_time``)
SLACK_S = 4 * ROUNDING_S / 2


def arrival_gap_bounds(a: Sent, b: Sent) -> tuple[float, float]:
    """Where ``t(b) − t(a)`` of the proxy's capture must lie, by causality alone.

    The proxy stamps a request's arrival (``t``, its ``sent``) after the script started
    sending it and before the script read its last byte: inside ``[row.sent, row.ended]``.
    Both are ``time.monotonic()``, one clock for every process of the host (Linux's
    ``CLOCK_MONOTONIC``), so the difference of two arrivals lies between the script's
    own stamps whatever the machine's load; no tolerance but the file's rounding."""
    return b.sent - a.ended - SLACK_S, b.ended - a.sent + SLACK_S


def think_bounds(a: Sent, b: Sent, api_time_a: float) -> tuple[float, float]:
    """Where the proxy's ``think_time`` of ``b`` (the request after ``a`` of one agent)
    must lie: ``t(b) = t(a) + api_time(a) + think_time(b)`` (the file's own chain), so
    the arrival gap's bounds less ``a``'s api time: from the script's own wait
    (``b.sent − a.ended``) less that api time, over a width of the two requests' round
    trips as the script measured them (a loaded machine widens both alike)."""
    lo, hi = arrival_gap_bounds(a, b)
    return lo - api_time_a, hi - api_time_a


def _read(raw: bytes, stream: bool) -> tuple[str, dict[str, Any]]:
    """The reply's text and the usage block of a chat answer (a stream or one body)."""
    if not stream:
        doc = orjson.loads(raw)
        return doc["choices"][0]["message"]["content"], doc["usage"]
    text, usage = [], None
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = orjson.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            text.append(choice.get("delta", {}).get("content") or "")
    assert usage is not None, "the stream carried no usage"
    return "".join(text), usage
