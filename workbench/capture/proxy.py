"""``CaptureProxy``: a loopback HTTP proxy that relays an agent's requests to an upstream
unchanged and records their token shape once each response was relayed
(docs/capture.md, "The relay").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from workbench import heap, redact
from workbench.capture.blocks import Salt
from workbench.capture.previous import Answers, Blocks, Earlier
from workbench.capture.prompt_blocks import PromptJob, prompt_blocks, worker_pool, worker_ready
from workbench.capture.protocols import (
    CAPTURED_PATHS,
    RESPONSES,
    SHAPE_ERRORS,
    AnswerReader,
    RequestFacts,
    ResponseFacts,
    request_facts,
    response_facts,
    responses_item_bytes,
)
from workbench.capture.sessions import Agent, Conversation, Sessions, Turn
from workbench.capture.tokens import TOKENIZERS, TokenSource
from workbench.capture.writer import conversation_id, document, remove_stale, write_atomic
from workbench.errors import ListenError
from workbench.plurals import counted
from workbench.signals import calling_on_signals

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

log = logging.getLogger(__name__)

DEFAULT_SESSION_HEADER = "X-Session-ID"
DEFAULT_PARENT_HEADER = "X-Parent-Session-ID"
#: headers that describe one connection, not the message (RFC 9110 §7.6.1): not relayed
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host",
    "content-length",
})  # fmt: skip
#: a request body larger than this is refused with 413 (the embedded engine's own bound)
MAX_BODY_BYTES = 64 * 2**20
#: a captured response's bytes kept for its counts; a longer one is relayed, not recorded
MAX_KEPT_BYTES = 64 * 2**20
#: a streamed answer's relayed pieces read together once this many bytes were relayed
#: (~100 chat events, ~0.2 ms): one call a piece cost the proxy 5-15 % more CPU a stream
#: (docs/capture.md, "The relay")
READ_BATCH_BYTES = 16 * 1024
#: how long leaving the context waits for requests in flight and files to be written (s)
STOP_TIMEOUT_S = 10.0
#: the most tokens (prompt + output) a recorded request may have: what every trace
#: reader takes for one round (docs/trace-bounds.md; capture does not import traces)
MAX_REQUEST_TOKENS = 10_000_000


class CaptureProxy:
    """``async with CaptureProxy(upstream, out_dir) as proxy``: listening at ``proxy.url``."""

    def __init__(
        self, upstream: str, out_dir: str | Path, *, host: str = "127.0.0.1", port: int = 0,
        tokenizer: str = "upstream", session_header: str = DEFAULT_SESSION_HEADER,
        parent_header: str = DEFAULT_PARENT_HEADER, salt_file: str | Path | None = None,
        prefix: str = "conv_", token_executor: concurrent.futures.Executor | None = None,
    ) -> None:  # fmt: skip
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, "
                             f"got {tokenizer!r}")
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"upstream must be an http:// or https:// URL, got "
                             f"{redact.safe_url(upstream)!r}")
        redact.register_url(upstream)
        if urlsplit(upstream).query or urlsplit(upstream).fragment:
            raise ValueError("the upstream URL takes no query or fragment (the agent's own "
                             "requests carry theirs, and they are relayed)")
        # user:password@ in the URL: sent as Basic authorization when the agent sends none
        self._basic = redact.basic_authorization(upstream)
        self.upstream = redact.strip_url_credentials(upstream).rstrip("/")
        self.upstream_shown = redact.safe_url(self.upstream)  # what may be printed
        self.out_dir = Path(out_dir)
        self.host, self.port = host, port
        self.tokenizer = tokenizer
        self.session_header, self.parent_header = session_header, parent_header
        self.salt_file = Path(salt_file) if salt_file is not None else None
        self.prefix = prefix
        self.url = ""
        self.salt = Salt()
        self.sessions = Sessions(self.salt.key)
        self.captured = 0  # requests recorded in a file
        self.passed = 0  # requests relayed and not recorded (other paths, errors, cut)
        self.failed = 0  # captured requests whose recording failed (logged)
        #: requests sent upstream once more: a reused connection died before any byte
        #: of the answer (docs/capture.md, "Idle upstream connections")
        self.resent = 0
        # Responses requests naming an answer this capture did not see (the first warned)
        self.prefix_unknown = 0
        #: captured-API requests relayed and not recorded, by reason (docs/capture.md)
        self.not_recorded: Counter[str] = Counter()
        self._ids = itertools.count()
        self._dirty: set[int] = set()
        self._conversations: dict[int, Conversation] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._handlers: set[asyncio.Task[Any]] = set()  # requests being relayed
        self._hurried = False
        self._flush_wake = asyncio.Event()
        self._stopping = False
        self._flusher: asyncio.Task[None] | None = None
        self._write_pool = concurrent.futures.ThreadPoolExecutor(1, "workbench-capture-writer")
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # resends: a new connection each
        self._tokens: TokenSource | None = None
        self._facts: dict[int, _Exchange] = {}
        # captured streamed requests: their answers are read as relayed (``_relay``)
        self._readers: dict[int, AnswerReader] = {}
        self._answers = Answers()
        # Responses requests being relayed: done once each one's end was taken in
        self._responses: dict[int, asyncio.Future[None]] = {}
        # Responses requests whose assignment waits for those (``_arrive``)
        self._deferred: dict[int, asyncio.Future[Any]] = {}
        # where the token work runs (``prompt_blocks``); default: a worker process
        self._pool = token_executor
        self._own_pool = token_executor is None

    async def __aenter__(self) -> CaptureProxy:
        from aiohttp import web

        self.out_dir.mkdir(parents=True, exist_ok=True)  # the user's folder (a link is theirs)
        heap.reads_from_heap()  # a streamed answer's reads not mapped one by one
        remove_stale(self.out_dir, self.prefix)
        self.sessions.number_after(_highest_number(self.out_dir, self.prefix))
        if self.salt_file is not None:
            self.salt.write(self.salt_file)
        if self._pool is None:
            # the worker process starts (its imports, the word tokenizer: 0.3-1 s) while
            # the proxy binds, not before: a request that comes first is relayed at once,
            # its token work queued behind this (docs/capture.md, "The relay")
            self._pool = worker_pool()
            self._pool.submit(worker_ready)
        self._client = _upstream_session(fresh=False)
        self._tokens = TokenSource(self.tokenizer, self.upstream, self._client)
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # auto_decompress off: a compressed request body goes upstream as the agent sent
        # it, with its Content-Encoding (inflated only to be read, in ``_arrive``)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=STOP_TIMEOUT_S, auto_decompress=False)
        await self._runner.setup()
        try:
            site = web.TCPSite(self._runner, self.host, self.port)
            await site.start()
        except BaseException as exc:
            await self._close()
            if isinstance(exc, OSError):  # unresolvable, not this machine's, in use
                raise ListenError(self.host, self.port, exc) from None
            raise
        port = self._runner.addresses[0][1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{port}"
        self._flusher = asyncio.create_task(self._flush_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        """Stop listening, let requests in flight finish, write every file one last time;
        a stop signal meanwhile (a second Ctrl-C) cuts the requests in flight at once
        (``_hurry``)."""
        # the stop signal that got here may still have its wake-up byte unread by the
        # loop (its handler ran as soon as Python code ran): one pass of the loop reads
        # it, or the handler installed here would take it for a second signal
        await asyncio.sleep(0)
        with calling_on_signals(asyncio.get_running_loop(), self._hurry):
            await self._close_now()

    def _hurry(self) -> None:
        """Cut the requests in flight, as aiohttp does at its shutdown timeout: their
        answers are not recorded; every finished one is still written. The recordings
        under way of finished requests go on (``_close_now`` waits for them, bounded):
        cancelling them lost a request the agent had whole (docs/capture.md, "The
        files")."""
        if not self._hurried:
            self._hurried = True
            log.warning("capture: stopping now: %s cut, not recorded",
                        counted(len(self._handlers), "request in flight", "requests in flight"))
        for task in self._handlers:
            task.cancel()

    async def _close_now(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.sleep(0)  # the last arrivals' and finishes' callbacks
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=STOP_TIMEOUT_S)
        if self._flusher is not None:
            self._stopping = True
            self._flush_wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._flusher), STOP_TIMEOUT_S)
            self._flusher = None
        self._write_pool.shutdown(wait=True)  # a write under way ends before the last pass
        if self._own_pool and self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._flush()
        for client in (self._client, self._fresh):
            if client is not None:
                await client.close()
        self._client = self._fresh = None

    def files(self) -> list[Path]:
        """The capture's conversation files written so far."""
        return sorted(self.out_dir / f"{conversation_id(c, self.prefix)}.json"
                      for c in self._conversations.values()
                      if (self.out_dir / f"{conversation_id(c, self.prefix)}.json").exists())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            return await self._relay(request)
        finally:
            self._handlers.discard(task)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        sent = time.monotonic()
        raw = await request.read()
        path = request.path
        captured = request.method == "POST" and path.endswith(CAPTURED_PATHS)
        xid = next(self._ids)
        loop = asyncio.get_running_loop()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        if self._basic is not None and "Authorization" not in request.headers:
            headers["Authorization"] = self._basic
        if captured:  # runs once this handler yields: after the request went upstream
            loop.call_soon(self._arrive, xid, sent, path, raw, request.headers)
        assert self._client is not None
        done = False
        why = "a cut answer"  # what keeps it from being recorded, until it is whole
        pieces: list[bytes] = []
        kept = 0
        resp: web.StreamResponse | None = None
        encoding = ""
        reader: AnswerReader | None = None
        try:
            async with await self._upstream_request(request.method, request.path_qs,
                                                    headers, raw) as up:  # fmt: skip
                resp = web.StreamResponse(status=up.status, reason=up.reason)
                for k, v in up.headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        resp.headers.add(k, v)
                chunked = "chunked" in up.headers.get("Transfer-Encoding", "").lower()
                if up.content_length is not None and not chunked:
                    resp.content_length = up.content_length
                await resp.prepare(request)
                keep = captured and up.status == 200
                encoding = up.headers.get("Content-Encoding", "").strip().lower()
                # a stream (as the request asked, read by ``_arrive`` while this one went
                # upstream) is read as it is relayed; a compressed one, at its end
                reader = self._readers.pop(xid, None) if keep else None
                if encoding not in ("", "identity"):
                    reader = None
                unread = 0  # the bytes of ``pieces`` (the reader's: not read yet)
                async for piece in up.content.iter_any():
                    await resp.write(piece)
                    if keep:
                        kept += len(piece)
                        if kept > MAX_KEPT_BYTES:
                            continue
                        pieces.append(piece)
                        unread += len(piece)
                        if reader is not None and unread >= READ_BATCH_BYTES:
                            reader.feed(b"".join(pieces))  # after the agent got them
                            pieces.clear()
                            unread = 0
                await resp.write_eof()
                done = keep and kept <= MAX_KEPT_BYTES
                why = "an error status" if not keep else "an answer over 64 MiB"
            return resp
        except (aiohttp.ClientError, TimeoutError) as exc:
            if resp is not None:  # the head went out: the agent sees the stream cut
                # its connection closed after the bytes relayed so far (returned, not
                # raised: aiohttp logs a raised error with a traceback)
                log.warning("capture: the upstream cut an answer (%s); the agent's "
                            "connection was closed, the request not recorded",
                            type(exc).__name__)
                if request.transport is not None:
                    request.transport.close()
                return resp
            # a 502 naming the error's class only (its text may carry the upstream's URL)
            return web.json_response(
                {"error": {"message": f"workbench capture: upstream request failed "
                           f"({type(exc).__name__})", "type": "upstream_error"}},
                status=502)  # fmt: skip
        finally:
            ended = time.monotonic()
            if captured:
                self._readers.pop(xid, None)
                body: bytes | AnswerReader | None = None
                if done and reader is not None:
                    reader.feed(b"".join(pieces))  # the last batch
                    body = reader
                elif done:
                    body = _decoded(b"".join(pieces), encoding)
                    if body is None:
                        why = "an answer compressed unreadably"
                loop.call_soon(self._finish, xid, ended, body, why, headers)
            else:
                self.passed += 1

    async def _upstream_request(self, method: str, path_qs: str, headers: Mapping[str, str],
                                raw: bytes) -> aiohttp.ClientResponse:
        """The upstream's answer (its head) to the agent's request; sent once more, on a new
        connection, when a reused one died before any byte of the answer: the upstream
        closed it idle and never read the request (docs/capture.md, "Idle upstream
        connections")."""
        import aiohttp

        assert self._client is not None
        url = self.upstream + path_qs
        conn = _Reuse()
        try:
            return await self._client.request(method, url, headers=headers, data=raw or None,
                                              allow_redirects=False, trace_request_ctx=conn)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if not conn.reused:  # a new connection refused or reset: the upstream's answer
                raise
        self.resent += 1
        if self._fresh is None:
            self._fresh = _upstream_session(fresh=True)
        return await self._fresh.request(method, url, headers=headers, data=raw or None,
                                         allow_redirects=False)

    def _arrive(self, xid: int, sent: float, path: str, raw: bytes,
                headers: Mapping[str, str]) -> None:
        body = _decoded(raw, headers.get("Content-Encoding", "").strip().lower())
        facts = request_facts(path, body) if body is not None else None
        if facts is None:  # not that API's JSON, or compressed other than gzip/deflate
            self._skip("a body not of its API's JSON" if body is not None
                       else "a body compressed unreadably")
            return
        if facts.stream and facts.choices == 1:
            self._readers[xid] = AnswerReader(facts.api)
        if facts.api != RESPONSES:
            self._assign(xid, sent, facts, headers)
            return
        # a Responses request naming an answer not seen yet, while Responses answers are
        # still being relayed: the agent may have that answer's last event already and
        # the relay not have ended. Its assignment waits for those relays' ends (each
        # registers its answer), then looks again; its own end waits for it.
        earlier = list(self._responses.values())
        self._responses[xid] = asyncio.get_running_loop().create_future()
        if facts.previous_response_id and earlier and \
                self._answers.get(facts.previous_response_id) is None:
            gate = asyncio.gather(*earlier)
            self._deferred[xid] = gate
            gate.add_done_callback(lambda _: self._assign(xid, sent, facts, headers))
            return
        self._assign(xid, sent, facts, headers)

    def _assign(self, xid: int, sent: float, facts: RequestFacts,
                headers: Mapping[str, str]) -> None:
        """A readable captured request's session assignment (``Sessions.arrive``)."""
        self._deferred.pop(xid, None)
        earlier = self._answers.get(facts.previous_response_id)
        if earlier is not None and earlier.preamble == self.salt.digest(facts.preamble):
            facts.prior_chain = earlier.chain  # the items the server holds come first
        else:  # unknown, or other instructions/tools: no prefix is claimed (_complete)
            earlier = None
        chain = self.sessions.chain(facts) if facts.api == RESPONSES else None
        turn = self.sessions.arrive(
            xid, sent, facts, headers.get(self.session_header), headers.get(self.parent_header),
            chain,
        )  # fmt: skip
        self._facts[xid] = _Exchange(facts, turn, chain, earlier)

    def _skip(self, why: str, conv: Conversation | None = None) -> None:
        """A captured-API request relayed and not recorded: counted by reason, and in its
        conversation's file when it has one (docs/capture.md, "What is captured")."""
        if not self.not_recorded:
            log.info("capture: a request was relayed and not recorded (%s); the capture "
                     "counts them by reason", why)
        self.not_recorded[why] += 1
        if conv is not None:
            conv.not_recorded += 1
            self._conversations[conv.number] = conv
            self._dirty.add(conv.number)
            self._flush_wake.set()

    def _finish(self, xid: int, ended: float, body: bytes | AnswerReader | None, why: str,
                headers: Mapping[str, str]) -> None:
        self._readers.pop(xid, None)  # a relay that ended before its arrival was read
        gate = self._deferred.get(xid)
        if gate is not None:  # its assignment waits for earlier relays: so does its end
            gate.add_done_callback(lambda _: self._finish(xid, ended, body, why, headers))
            return
        try:
            self._finish_now(xid, ended, body, why, headers)
        finally:  # a request whose assignment waited for this relay goes on
            done = self._responses.pop(xid, None)
            if done is not None and not done.done():
                done.set_result(None)

    def _finish_now(self, xid: int, ended: float, body: bytes | AnswerReader | None, why: str,
                    headers: Mapping[str, str]) -> None:
        got = self._facts.pop(xid, None)
        if got is None:  # not a request of a captured API
            self.passed += 1
            return
        facts, turn = got.facts, got.turn
        if body is None:  # an error status, a cut stream, a response too long to keep
            self._skip(why, self.sessions.abandon(xid))
            self.passed += 1
            return
        if facts.choices > 1:  # one output a request in the format (docs/capture.md)
            self._skip("n > 1 (several choices)", self.sessions.abandon(xid))
            self.passed += 1
            return
        try:
            if isinstance(body, AnswerReader):  # read as it was relayed: its last event
                got_response = body.close()
            else:
                got_response = response_facts(facts.api, facts.stream, body)
        except SHAPE_ERRORS as exc:
            # JSON not of its API's shape (``choices`` a number): relayed as it came, not
            # recorded; raised here, in a loop callback, it left the turn open
            self._skip("an answer not of its API's shape", self.sessions.abandon(xid))
            self.failed += 1
            log.error("capture: a request could not be recorded (its answer is not of "
                      "its API's shape: %s)", type(exc).__name__)
            return
        if got_response.failed:  # a Responses stream that ended in response.failed
            self._skip("a failed answer", self.sessions.abandon(xid))
            self.passed += 1
            return
        finished = self.sessions.finish(xid, ended, got_response.stop)
        if finished is None:
            return
        agent, _ = finished
        blocks: asyncio.Future[Blocks] | None = None
        if got.chain is not None and got_response.response_id:
            blocks = asyncio.get_running_loop().create_future()
            outputs = [responses_item_bytes(i) for i in got_response.output_items]
            self._answers.put(got_response.response_id, Earlier(
                self.salt.digest(facts.preamble), self.sessions.extend(got.chain, outputs),
                blocks))  # fmt: skip
        task = asyncio.create_task(self._complete(agent, turn, got, got_response, headers,
                                                  blocks))
        self._pending.add(task)
        task.add_done_callback(self._completed)

    def _completed(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # the class only: a message could quote a body or a header
            self.failed += 1
            log.error("capture: a request could not be recorded (%s)",
                      type(task.exception()).__name__)

    async def _complete(self, agent: Agent, turn: Turn, exchange: _Exchange,
                        got: ResponseFacts, headers: Mapping[str, str],
                        blocks: asyncio.Future[Blocks] | None) -> None:
        """Counts from the response, ids from the tokenizer, hashes: the turn is done
        (``blocks``: this answer's, for a later request naming it; set on every path)."""
        try:
            await self._record(agent, turn, exchange, got, headers, blocks)
        finally:
            if blocks is not None and not blocks.done():
                blocks.set_result(None)

    async def _record(self, agent: Agent, turn: Turn, exchange: _Exchange,
                      got: ResponseFacts, headers: Mapping[str, str],
                      blocks: asyncio.Future[Blocks] | None) -> None:
        assert self._tokens is not None
        facts = exchange.facts
        output = got.output_tokens if got.output_tokens is not None else got.output_events
        job = PromptJob(self.salt.key, facts, got.prompt_tokens, output, MAX_REQUEST_TOKENS)
        if facts.api == RESPONSES:
            self._tokens.responses_prompt()  # word, whatever --tokenizer says
            job.earlier = await exchange.earlier.blocks if exchange.earlier is not None else None
            job.prefix_unknown = job.earlier is None and facts.server_items
            if blocks is not None:
                job.output_items = got.output_items
        else:  # the body says it all: the digests of its messages need not travel
            job.facts = dataclasses.replace(facts, messages=[], tool_result=[])
            job.ids = await self._tokens.upstream_ids(facts, headers)
        if job.prefix_unknown:
            self._prefix_unknown(turn)
        # the tokenizing and hashing: off the loop, which stamps and relays the others
        assert self._pool is not None
        pool = self._pool
        try:
            done = await asyncio.get_running_loop().run_in_executor(pool, prompt_blocks, job)
        except concurrent.futures.BrokenExecutor:
            # the worker died (killed, out of memory): this request is not recorded, the
            # next ones go to a new worker (one line says so: _completed)
            if self._own_pool and self._pool is pool and not self._stopping:
                pool.shutdown(wait=False)
                self._pool = worker_pool()
            raise
        if done.digests is None:
            # no reader takes it (and its blocks would be hashed one by one): not recorded
            self.failed += 1
            log.error("capture: a request could not be recorded (its answer counts %s "
                      "tokens, past the %s per request a trace may hold: "
                      "docs/trace-bounds.md)", f"{done.prompt_tokens + output:,}",
                      f"{MAX_REQUEST_TOKENS:,}")
            return
        turn.prompt_tokens, turn.output_tokens = done.prompt_tokens, output
        turn.output_types = got.output_types or ["text"]
        turn.stop = got.stop
        if blocks is not None and done.answer is not None:
            blocks.set_result(done.answer)  # the prompt and the answer: a later prefix
        turn.hash_ids = agent.conversation.ids.number(done.digests)
        self.captured += 1
        conv = agent.conversation
        self._conversations[conv.number] = conv
        self._dirty.add(conv.number)
        self._flush_wake.set()

    def _prefix_unknown(self, turn: Turn) -> None:
        """A Responses request naming an answer the capture did not see: only its
        preamble is known (one warning; the file counts it)."""
        turn.prefix_unknown = True
        self.prefix_unknown += 1
        if self.prefix_unknown == 1:
            log.warning("capture: a /v1/responses request continues items held by the "
                        "server that this capture did not see (a previous_response_id "
                        "of an answer it did not record, or with other instructions or "
                        "tools; a conversation); its prompt is recorded with the "
                        "usage's token count and no shared blocks past its instructions "
                        "and tools, and its file's requests_prefix_unknown counts it "
                        "(docs/capture.md)")

    async def _flush_loop(self) -> None:
        """Rewrite changed conversations as requests finish (files written by a thread)."""
        loop = asyncio.get_running_loop()
        while True:  # bounded: ends when _close sets _stopping
            await self._flush_wake.wait()
            self._flush_wake.clear()
            docs = self._documents()
            if docs:  # never cancelled mid-pass: a queued write would be dropped
                await loop.run_in_executor(self._write_pool, self._write, docs)
            if self._stopping:
                return

    def _documents(self) -> list[dict[str, Any]]:
        dirty, self._dirty = self._dirty, set()
        docs = [document(self._conversations[n], self.prefix) for n in sorted(dirty)]
        return [d for d in docs if d is not None]

    def _write(self, docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            write_atomic(self.out_dir / f"{doc['id']}.json", doc)

    def _flush(self) -> None:
        """Rewrite every conversation that changed since its last write (on stopping)."""
        self._write(self._documents())


@dataclass(slots=True, eq=False)
class _Exchange:
    """A captured request between its arrival and its recording: its facts and turn; a
    Responses request's session chain and the earlier answer it continues."""

    facts: RequestFacts
    turn: Turn
    chain: list[bytes] | None = None
    earlier: Earlier | None = None


def _decoded(body: bytes, encoding: str) -> bytes | None:
    """A captured request's or answer's bytes inflated to be read (at most
    ``MAX_KEPT_BYTES``); None for an encoding it cannot read."""
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        return None
    import zlib

    # 32 + 15: a gzip or zlib header, found; ``deflate`` without zlib's header too (raw
    # deflate: what some servers and clients send, and browsers take)
    for wbits in (47, -15) if encoding == "deflate" else (47,):
        try:
            inflater = zlib.decompressobj(wbits)
            out = inflater.decompress(body, MAX_KEPT_BYTES)
        except zlib.error:
            continue
        return None if inflater.unconsumed_tail else out
    return None


def _highest_number(directory: Path, prefix: str) -> int:
    """The largest conversation number in ``directory`` (a new capture numbers after it)."""
    best = 0
    for p in directory.glob(f"{prefix}*.json"):
        tail = p.stem[len(prefix):]
        if tail.isdigit():
            best = max(best, int(tail))
    return best


def read_capture(directory: str | Path) -> list[dict[str, Any]]:
    """The capture's files as documents (tests, notebooks)."""
    return [orjson.loads(p.read_bytes()) for p in sorted(Path(directory).glob("*.json"))]


class _Reuse:
    """One upstream request's trace context: whether it went on a pooled connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, _Reuse):
        ctx.trace_request_ctx.reused = True


def _upstream_session(*, fresh: bool) -> aiohttp.ClientSession:
    """The client to the upstream: idle connections kept at most ``CONNECTION_IDLE_S``
    (below the engines' 5 s; aiohttp's own default is 15 s), or (``fresh``) none reused."""
    import aiohttp

    from workbench.keepalive import CONNECTION_IDLE_S

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reuse)
    reuse: dict[str, Any] = (
        {"force_close": True} if fresh else {"keepalive_timeout": CONNECTION_IDLE_S})
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, **reuse),
        auto_decompress=False,  # the agent gets the bytes the upstream sent
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[trace],
    )
