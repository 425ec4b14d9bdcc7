"""The embedded engine's ``POST /tokenize`` (vLLM's shape): the ids it would prefill,
chat template included, so their count is the usage's ``prompt_tokens``."""

from __future__ import annotations

import aiohttp


async def test_tokenize_counts_as_the_engine_prefills(sim) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    async with aiohttp.ClientSession() as http:
        async with http.post(sim.base_url + "/tokenize", json={"messages": messages}) as r:
            chat = await r.json()
        async with http.post(sim.base_url + "/v1/chat/completions",
                             json={"messages": messages, "max_tokens": 2}) as r:
            usage = (await r.json())["usage"]
        async with http.post(sim.base_url + "/tokenize", json={"prompt": "a b c"}) as r:
            text = await r.json()
        async with http.post(sim.base_url + "/tokenize", json={"prompt": [5, 9]}) as r:
            ids = await r.json()
        async with http.post(sim.base_url + "/tokenize", data=b"[1]") as r:
            bad = r.status, await r.json()
    assert chat["count"] == len(chat["tokens"]) == usage["prompt_tokens"] == 2 * 2 + 4 + 1
    assert chat["max_model_len"] == sim.config.max_model_len and chat["token_strs"] is None
    assert text["count"] == 3 and ids["tokens"] == [5, 9]
    assert bad[0] == 400 and "JSON object" in bad[1]["error"]["message"]
