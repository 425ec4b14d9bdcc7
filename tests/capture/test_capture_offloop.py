"""The capture's token work runs off the proxy's event loop: a huge prompt being
tokenized and hashed holds up no other conversation's relay or stamps, and the values
recorded are those of the same work done in place (docs/capture.md, "The relay")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from capture_process import stopped_listening
from waiting import BOUND_S, POLL_S

from workbench.capture import CaptureProxy, read_capture
from workbench.capture.blocks import BLOCK_SIZE
from workbench.capture.protocols import request_facts
from workbench.capture.tokens import word_ids

#: ~1.2 MB of prompt: 180,000 words (the size that held the loop ~0.37 s)
HUGE = {"model": "m", "messages": [
    {"role": "user", "content": " ".join(f"w{i % 5000}x" for i in range(180_000))}]}
SMALL = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
         "messages": [{"role": "user", "content": "say hi " * 70}]}
ANSWER = {"id": "c1", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "ok"}}]}  # no usage
PIECES = [{"id": "s", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": {"content": f"w{k}"}, "finish_reason": None}]}
          for k in range(5)]
LAST = {"id": "s", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 212, "completion_tokens": 5}}


class HeldFirst(concurrent.futures.ThreadPoolExecutor):
    """Two threads; the first job submitted waits for ``release`` (``started`` says it
    is running): the token work of the huge prompt, held as long as the test likes."""

    def __init__(self, threads: int = 2) -> None:
        super().__init__(threads)
        self.started, self.release = threading.Event(), threading.Event()
        self._first = True

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future[Any]:
        if not self._first:
            return super().submit(fn, *args, **kwargs)
        self._first = False

        def held() -> Any:
            self.started.set()
            self.release.wait(BOUND_S)
            return fn(*args, **kwargs)

        return super().submit(held)


async def _upstream(loopback) -> str:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if not body.get("stream"):
            return web.json_response(ANSWER)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in [*PIECES, LAST]:
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application(client_max_size=64 * 2**20)  # aiohttp's default: 1 MiB
    app.router.add_post("/v1/chat/completions", chat)
    return await loopback(app)


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_S):
        while not check():
            await asyncio.sleep(POLL_S)


async def test_a_huge_prompts_token_work_holds_no_other_relay(loopback, tmp_path: Path
                                                              ) -> None:
    """While the huge prompt's token work runs (held here), another conversation's stream
    is relayed whole and recorded — its end stamped, its file written — and the huge
    request is recorded after, with the counts of the word tokenizer run in place. The
    proxy tokenized on its event loop: nothing else moved until it was done."""
    pool = HeldFirst()
    upstream = await _upstream(loopback)
    async with CaptureProxy(upstream, tmp_path, tokenizer="word", token_executor=pool,
                            session_header="X-Session-ID") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        async with http.post(proxy.url + "/v1/chat/completions", json=HUGE,
                             headers={"X-Session-ID": "big"}) as resp:
            assert resp.status == 200 and await resp.json() == ANSWER
        assert await asyncio.to_thread(pool.started.wait, BOUND_S)
        async with http.post(proxy.url + "/v1/chat/completions", json=SMALL,
                             headers={"X-Session-ID": "small"}) as resp:
            raw = await resp.read()
        assert raw.count(b"data: ") == len(PIECES) + 2
        await _until(lambda: len(read_capture(tmp_path)) == 1)  # written by a thread
        assert not pool.release.is_set() and proxy.captured == 1  # the huge one: held
        (small,) = read_capture(tmp_path)
        assert [(r["in"], r["out"]) for r in small["requests"]] == [(212, 5)]
        pool.release.set()
        await _until(lambda: proxy.captured == 2)
    pool.shutdown()
    docs = {len(d["requests"][0]["hash_ids"]): d for d in read_capture(tmp_path)}
    counted = len(word_ids(request_facts("/v1/chat/completions", orjson.dumps(HUGE))))
    huge = docs[counted // BLOCK_SIZE]["requests"][0]
    assert (huge["in"], huge["out"]) == (counted, 1)  # no usage, not a stream: "ok" in words
    assert huge["hash_ids"] == list(range(1, counted // BLOCK_SIZE + 1))


async def test_the_worker_process_records_what_the_work_in_place_does(loopback,
                                                                      tmp_path: Path) -> None:
    """The default (a worker process) and a thread running the same function record the
    same files, times aside."""
    upstream = await _upstream(loopback)
    rounds = [HUGE, SMALL, {**HUGE, "messages": [*HUGE["messages"],
                                                 {"role": "assistant", "content": "ok"},
                                                 {"role": "user", "content": "more " * 90}]}]
    files = []
    for name, pool in (("process", None), ("thread", concurrent.futures.ThreadPoolExecutor(1))):
        out = tmp_path / name
        async with CaptureProxy(upstream, out, tokenizer="word", token_executor=pool) as proxy, \
                aiohttp.ClientSession() as http:  # fmt: skip
            for body in rounds:
                async with http.post(proxy.url + "/v1/chat/completions", json=body) as resp:
                    await resp.read()
            await _until(lambda: proxy.captured == len(rounds))
        if pool is not None:
            pool.shutdown()
        files.append([_untimed(d) for d in read_capture(out)])
    assert files[0] == files[1] and len(files[0]) == 2


def _untimed(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "requests": [{k: v for k, v in r.items()
                                 if k not in ("t", "api_time", "think_time")}
                                for r in doc["requests"]]}


async def test_a_worker_that_died_is_replaced(loopback, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """The worker process killed (out of memory, say): the request whose token work it
    would have done is not recorded (one line naming the error's class), the next ones
    are, by a new worker. Every later request failed the same way."""
    import logging
    import multiprocessing
    import os
    import signal

    upstream = await _upstream(loopback)
    body = {"model": "m", "messages": [{"role": "user", "content": "hello " * 100}]}
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http:  # fmt: skip
        (worker,) = multiprocessing.active_children()
        os.kill(worker.pid, signal.SIGKILL)
        worker.join()
        for k in range(3):
            async with http.post(proxy.url + "/v1/chat/completions",
                                 json={**body, "user": str(k)}) as resp:
                await resp.read()
            await _until(lambda k=k: proxy.captured + proxy.failed == k + 1)
    assert (proxy.failed, proxy.captured) == (1, 2)
    assert any("BrokenProcessPool" in r.getMessage() for r in caplog.records
               if r.levelno >= logging.ERROR)


async def test_a_capture_of_one_request_records_it_with_its_token_work_queued(
        loopback, tmp_path: Path) -> None:  # fmt: skip
    """The token worker not ready yet (its first job held here: one thread): the request
    is relayed at once, its token work queued; the capture stopped then still records it
    once the work is done (the worker starts while the proxy binds, no longer before)."""
    pool = HeldFirst(threads=1)
    upstream = await _upstream(loopback)
    proxy = CaptureProxy(upstream, tmp_path, tokenizer="word", token_executor=pool)
    await proxy.__aenter__()
    try:
        async with aiohttp.ClientSession() as http, \
                http.post(proxy.url + "/v1/chat/completions", json=SMALL) as resp:
            raw = await resp.read()  # whole, while its token work is held
        assert raw.count(b"data: ") == len(PIECES) + 2
        assert await asyncio.to_thread(pool.started.wait, BOUND_S)
        assert proxy.captured == 0
        stopping = asyncio.create_task(proxy.__aexit__(None, None, None))
        await stopped_listening(proxy.url)  # stopping: it waits for the work
        pool.release.set()
        await stopping
    finally:
        pool.release.set()
        pool.shutdown()
    assert proxy.captured == 1
    ((request,),) = [d["requests"] for d in read_capture(tmp_path)]
    assert (request["in"], request["out"]) == (212, 5)


async def test_a_capture_stopped_right_after_its_first_request_records_it(
        loopback, tmp_path: Path) -> None:  # fmt: skip
    """The worker process as the proxy starts it (``spawn``, 0.3-1 s to be ready): one
    request sent as soon as the proxy listens, the proxy stopped as soon as it was
    answered: recorded."""
    upstream = await _upstream(loopback)
    async with CaptureProxy(upstream, tmp_path, tokenizer="word") as proxy, \
            aiohttp.ClientSession() as http, \
            http.post(proxy.url + "/v1/chat/completions", json=SMALL) as resp:  # fmt: skip
        await resp.read()
    assert proxy.captured == 1
    ((request,),) = [d["requests"] for d in read_capture(tmp_path)]
    assert (request["in"], request["out"]) == (212, 5)
