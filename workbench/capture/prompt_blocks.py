"""A captured prompt's token ids and block digests, computed away from the proxy's event
loop: the loop stamps every other request's arrival and relays their answers, and a
1 MB prompt's word tokenizing and hashing held it ~0.1-0.4 s (docs/capture.md, "The
relay"). ``prompt_blocks`` is one plain function of picklable arguments, so it runs in
a worker process (``worker_pool``): a thread would hold the GIL in pure Python and
still hold the loop up (measured: bench/README.md, "capture proxy").
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import signal
from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.capture.blocks import BLOCK_SIZE, Salt, block_digests, chained_blocks
from workbench.capture.previous import Blocks
from workbench.capture.protocols import (
    RESPONSES,
    RequestFacts,
    preamble_segments,
    responses_segments,
)
from workbench.capture.tokens import generation_id, segment_ids, word_ids
from workbench.signals import die_with_parent
from workbench.tokenizer import get_tokenizer


@dataclass(slots=True)
class PromptJob:
    """What one recorded request's token work needs (no session state: picklable)."""

    key: bytes  # the capture's salt
    facts: RequestFacts  # ``messages`` left empty but for a Responses request's
    prompt_tokens: int | None  # the usage's; None: the tokenizer counts
    output_tokens: int
    max_tokens: int  # prompt + output past this: not hashed (docs/trace-bounds.md)
    ids: list[int] | None = None  # the upstream's ``/tokenize`` ids; None: ``word``
    #: Responses API: the earlier answer's blocks this prompt continues, and whether
    #: the prompt continues server-held items the capture did not see
    earlier: Blocks = None
    prefix_unknown: bool = False
    #: Responses API: the answer's output items (the blocks of prompt and answer are
    #: what a later request naming it continues); None: not wanted
    output_items: list[dict[str, Any]] | None = field(default=None, repr=False)


@dataclass(slots=True)
class PromptBlocks:
    """The result: the prompt's count, its digests (None: past ``max_tokens``) and, for
    a Responses answer, its prompt-and-output blocks."""

    prompt_tokens: int
    digests: list[bytes] | None
    answer: Blocks = None


def prompt_blocks(job: PromptJob) -> PromptBlocks:
    """Tokenize (unless the upstream did) and hash one prompt (docs/capture.md, "Token
    ids and hash ids"); values equal wherever it runs."""
    salt = Salt(job.key)
    after: list[bytes] = []
    head: list[int] = []  # a Responses prompt's ids past ``after``, before its end
    if job.facts.api == RESPONSES:
        ids, after, head = _responses_ids(job)
    else:
        ids = job.ids if job.ids is not None else word_ids(job.facts)
    # usage absent, or 0: a server that did not count (no prompt is empty; the format
    # and its readers take `in` >= 1): the tokenizer counts it
    prompt = job.prompt_tokens or len(after) * BLOCK_SIZE + len(ids)
    if prompt + max(job.output_tokens, 1) > job.max_tokens:
        return PromptBlocks(prompt, None)  # its blocks would be hashed one by one
    digests = list(block_digests(salt, ids, prompt, after))
    answer = None
    if job.output_items is not None and not job.prefix_unknown:
        stream = head + segment_ids(responses_segments(job.output_items))
        full = len(stream) // BLOCK_SIZE * BLOCK_SIZE
        chained = chained_blocks(salt, stream[:full], after[-1] if after else b"")
        answer = ([*after, *chained], stream[full:])
    return PromptBlocks(prompt, digests, answer)


def _responses_ids(job: PromptJob) -> tuple[list[int], list[bytes], list[int]]:
    """A Responses prompt's token ids as ``(ids, after, head)``: ``after`` the digests
    of the blocks an earlier answer's request and output fill, ``ids`` what follows
    them (generation mark included), ``head`` the same without the mark. A prompt
    continuing items the capture did not see: its preamble only."""
    facts = job.facts
    items = responses_segments([orjson.loads(m) for m in facts.messages])
    if job.earlier is not None:
        after, tail = job.earlier
        head = tail + segment_ids(items)
    elif job.prefix_unknown:
        preamble = segment_ids(preamble_segments(facts))
        return preamble, [], preamble  # what follows the preamble is not known
    else:
        after, head = [], segment_ids(preamble_segments(facts) + items)
    return [*head, generation_id()], after, head


def _worker_start(parent: int) -> None:
    """A worker ends with the proxy's process however it ends (SIGKILL included), and
    leaves Ctrl-C to the proxy (which lets the requests in flight finish)."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_pool() -> concurrent.futures.ProcessPoolExecutor:
    """One worker process (``spawn``: the proxy has threads, which ``fork`` would copy
    mid-state); started by its first job (``worker_ready``)."""
    return concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start,
        initargs=(os.getpid(),))


def worker_ready() -> None:
    """The first job: the worker's imports done and the word tokenizer built."""
    get_tokenizer()
