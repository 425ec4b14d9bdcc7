"""Each fault switch of the embedded engine produces the fault it names."""

import asyncio

import aiohttp
import orjson
import pytest

from workbench.sim.server import serve_sim

TIMEOUT = 20


async def events(resp):
    out = []
    async for raw in resp.content:
        line = raw.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return out


def body(n=5, **extra):
    opts = {"include_usage": True}
    return {"prompt": list(range(10, 50)), "max_tokens": n, "stream": True,
            "stream_options": opts, "return_token_ids": True, **extra}  # fmt: skip


async def test_error_rate_answers_500_with_json_and_is_seeded():
    async def statuses(**knobs):
        async with serve_sim(zero_cost=True, **knobs) as sim, aiohttp.ClientSession() as s:
            out = []
            for _ in range(20):
                async with s.post(sim.base_url + "/v1/completions", json=body(1)) as r:
                    out.append(r.status)
                    if r.status == 500:
                        err = await r.json()
                        assert err["error"]["code"] == 500 and "fault" in err["error"]["message"]
            return out

    async with asyncio.timeout(TIMEOUT):
        always = await statuses(error_rate=1.0)
        half = await statuses(error_rate=0.5, seed=5)
        again = await statuses(error_rate=0.5, seed=5)
    assert always == [500] * 20
    assert half == again and 500 in half and 200 in half


async def test_disconnect_mid_stream_after_n_tokens():
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(zero_cost=True, disconnect_after_tokens=3) as sim,
    ):
        async with aiohttp.ClientSession() as s:
            got = []
            with pytest.raises(aiohttp.ClientPayloadError):
                async with s.post(sim.base_url + "/v1/completions", json=body(50)) as r:
                    async for raw in r.content:
                        if raw.startswith(b"data: "):
                            got.append(orjson.loads(raw[6:]))
            await asyncio.sleep(0)
        stats = sim.engine.stats()
    assert sum(len(c["choices"][0]["token_ids"]) for c in got) == 3
    assert stats["requests_aborted"] == 1 and stats["kv_usage"] == 0.0


async def test_stall_stops_sending_for_the_configured_time():
    knobs = {"zero_cost": True, "stall_after_tokens": 2, "stall_s": 0.3}
    async with asyncio.timeout(TIMEOUT), serve_sim(**knobs) as sim, aiohttp.ClientSession() as s:
        async with s.post(sim.base_url + "/v1/completions", json=body(4, rid="st")) as r:
            chunks = await events(r)
        (row,) = sim.debug_requests()
    assert len(chunks) == 5  # 4 tokens + usage: the stream resumes after the stall
    assert row["sent_ns"][2] - row["sent_ns"][1] >= 300_000_000


async def test_omit_usage():
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(zero_cost=True, omit_usage=True) as sim,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(sim.base_url + "/v1/completions", json=body(3)) as r:
            chunks = await events(r)
        unary = {"prompt": [1, 2, 3], "max_tokens": 2}
        async with s.post(sim.base_url + "/v1/completions", json=unary) as r:
            full = await r.json()
        sg = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        async with s.post(sim.base_url + "/generate", json=sg) as r:
            sglang = await r.json()
    assert len(chunks) == 3 and all("usage" not in c for c in chunks)
    assert "usage" not in full and "cached_tokens" not in sglang["meta_info"]


async def test_sglang_cumulative_streaming():
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(zero_cost=True, sglang_cumulative=True) as sim,
        aiohttp.ClientSession() as s,
    ):
        sg = {"input_ids": list(range(30)), "stream": True,
              "sampling_params": {"max_new_tokens": 4}}  # fmt: skip
        async with s.post(sim.base_url + "/generate", json=sg) as r:
            chunks = await events(r)
    ids = [c["output_ids"] for c in chunks]
    assert [len(x) for x in ids] == [1, 2, 3, 4]
    assert all(ids[k][:k] == ids[k - 1] for k in range(1, 4))
    assert chunks[-1]["meta_info"]["completion_tokens"] == 4


async def test_sglang_prompt_echo():
    prompt = list(range(100, 130))
    async with (
        asyncio.timeout(TIMEOUT),
        serve_sim(zero_cost=True, sglang_prompt_echo=5) as sim,
        aiohttp.ClientSession() as s,
    ):
        sg = {"input_ids": prompt, "stream": True, "sampling_params": {"max_new_tokens": 3}}
        async with s.post(sim.base_url + "/generate", json=sg) as r:
            chunks = await events(r)
    first = chunks[0]["output_ids"]
    assert first[:5] == prompt[-5:] and len(first) == 6
    assert [len(c["output_ids"]) for c in chunks[1:]] == [1, 1]
    assert chunks[-1]["meta_info"]["completion_tokens"] == 3  # more ids than completion_tokens
