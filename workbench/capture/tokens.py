"""Where a captured prompt's token ids come from (``--tokenizer``: ``upstream``, falling
back to ``word``; docs/capture.md, "Token ids and hash ids")."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from workbench import redact
from workbench.bodies import BodyError, read_body
from workbench.capture.protocols import CHAT, COMPLETIONS, RequestFacts, prompt_segments
from workbench.tokenizer import get_tokenizer

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

TOKENIZERS = ("upstream", "word")
#: how long one ``/tokenize`` call may take (s); past it, the local tokenizer counts
TOKENIZE_TIMEOUT_S = 30.0
#: the largest ``/tokenize`` answer read (a 4M-token prompt's ids fit); past it: ``word``
TOKENIZE_MAX = 64 * 2**20
#: the agent headers the tokenize call carries (credentials a server may ask for)
_FORWARDED = ("authorization", "x-api-key", "api-key", "cookie")
_ROLES = {"system": "<|system|>", "developer": "<|system|>", "user": "<|user|>",
          "assistant": "<|assistant|>", "tool": "<|tool|>", "function": "<|tool|>"}


def word_ids(facts: RequestFacts) -> list[int]:
    """The prompt as the word tokenizer and the embedded engine's chat template see it."""
    tok = get_tokenizer()
    if facts.api == COMPLETIONS:
        prompt = facts.body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list | str):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(type(t) is int for t in prompt):
            return list(prompt)
        return tok.encode(prompt if isinstance(prompt, str) else "")
    return [*segment_ids(prompt_segments(facts)), generation_id()]


def segment_ids(segments: Iterable[tuple[str, str]]) -> list[int]:
    """``<|role|> text <|end|>`` per ``(role, text)``: the embedded engine's chat template
    without its closing ``<|assistant|>`` (``generation_id``)."""
    tok = get_tokenizer()
    end = tok.token_id("<|end|>")
    ids: list[int] = []
    for role, text in segments:
        ids += [tok.token_id(_ROLES.get(role, "<|user|>")), *tok.encode(text), end]
    return ids


def generation_id() -> int:
    """The id that ends a prompt: the assistant's turn begins."""
    return get_tokenizer().token_id("<|assistant|>")


class TokenSource:
    """``await upstream_ids(facts, headers)``: a prompt's token ids from the upstream's
    ``/tokenize``, or None: the ``word`` tokenizer counts it (``kind`` in ``TOKENIZERS``;
    run off the event loop, ``workbench.capture.prompt_blocks``)."""

    def __init__(self, kind: str, upstream: str, session: aiohttp.ClientSession | None) -> None:
        if kind not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {kind!r}")
        self.kind = kind
        self.url = upstream.rstrip("/") + "/tokenize"
        self.session = session
        self.upstream_ok = kind == "upstream" and session is not None
        self._responses_said = False

    async def upstream_ids(self, facts: RequestFacts,
                           headers: Mapping[str, str]) -> list[int] | None:
        if self.upstream_ok and facts.api in (CHAT, COMPLETIONS):
            got = await self._upstream(facts, headers)
            if not isinstance(got, str):
                return got  # non-integers fail in block_digests (the turn keeps no hash ids)
            self._refused(got)
        return None

    async def _upstream(self, facts: RequestFacts, headers: Mapping[str, str]) -> list[int] | str:
        """The upstream's token ids for the prompt, or why it gave none."""
        import aiohttp

        assert self.session is not None
        body: dict[str, Any] = {"model": facts.model} if facts.model else {}
        if facts.api == CHAT:
            body["messages"] = facts.body.get("messages")
            body["add_generation_prompt"] = True
            if facts.body.get("tools"):
                body["tools"] = facts.body["tools"]
        else:
            body["prompt"] = facts.body.get("prompt")
        sent = {k: v for k, v in headers.items() if k.lower() in _FORWARDED}
        sent["Content-Type"] = "application/json"
        try:
            async with self.session.post(
                self.url, data=orjson.dumps(body), headers=sent,
                timeout=aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S),
            ) as resp:  # fmt: skip
                answer = await read_body(resp, TOKENIZE_MAX)  # bounded, inflated piecewise
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, BodyError) as exc:
            return type(exc).__name__
        if status != 200:
            return f"HTTP {status}"
        if answer.cut:
            return f"an answer over {TOKENIZE_MAX} bytes (cut)"
        try:
            tokens = orjson.loads(answer.data).get("tokens")
        except (orjson.JSONDecodeError, AttributeError):
            tokens = None
        return tokens if isinstance(tokens, list) else "an answer without a token list"

    def responses_prompt(self) -> None:
        """A Responses API prompt is tokenized by ``word`` whatever ``kind`` says (one
        line the first time ``upstream`` was asked for). Why: vLLM's and SGLang's
        ``/tokenize`` take chat messages or a prompt, no Responses items; and a request
        naming an earlier answer (``previous_response_id``) continues that answer's
        blocks, whose text the capture never keeps, so its ids past them can only come
        from a tokenizer the capture runs itself, the same for every round of the agent
        (docs/capture.md, "Token ids and hash ids")."""
        if self.kind == "upstream" and not self._responses_said:
            self._responses_said = True
            log.warning("capture: /v1/responses prompts are tokenized by the built-in word "
                        "tokenizer, not the upstream's /tokenize (it takes no Responses "
                        "items; docs/capture.md)")

    def _refused(self, why: str) -> None:
        # one line, the URL only (no header, no body: docs/security.md)
        log.warning("capture: %s answered /tokenize with %s; prompts are tokenized by the "
                    "built-in word tokenizer from now on (docs/capture.md)",
                    redact.safe_url(self.url), why)
        self.upstream_ok = False
