"""Prefix-cache preflight: prove the server caches prefixes before measuring it
(docs/wire-protocols.md, "Prefix-cache preflight")."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.backends.base import BackendError, Codec, WireRequest
from workbench.backends.transport import Transport
from workbench.records import RequestRecord

__all__ = ["PreflightResult", "preflight_prefix_cache"]

DEFAULT_PROBE_TOKENS = 8192

_TOO_LONG = re.compile(r"max(imum)?[ _-]*(model|context)[ _-]*len", re.IGNORECASE)


def _too_long(rec: RequestRecord) -> bool:
    """The server refused the probe for its length (HTTP 400, or an in-stream error)."""
    if rec.http_status == 400:
        return True
    return rec.status == "error" and bool(_TOO_LONG.search(rec.error or ""))


def _credentials_hint(transport: Transport, rec: RequestRecord) -> str:
    """What to do about a 401/403: the key goes in the environment (docs/security.md)."""
    if rec.http_status not in (401, 403):
        return ""
    if transport.auth_headers():
        return " (the credentials sent were refused: is it this server's key?)"
    env = transport.options.api_key_env
    named = f"${env}" if env else "the variable backend.api_key_env names"
    return (f" (no key was sent: {named} is not set; put the server's key there, never in "
            "a file or on the command line)")


@dataclass(frozen=True)
class PreflightResult:
    """What the probes showed (``first``/``second``: the probe records as dicts)."""

    probe_tokens: int
    prompt_tokens: int | None
    cached_tokens: int
    first: dict[str, Any]
    second: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def _probe(
    transport: Transport, codec: Codec, ids: Sequence[int], request_id: str
) -> RequestRecord:
    rec = RequestRecord(
        run_id="preflight",
        request_id=request_id,
        unit_ordinal=-1,
        session_id=request_id,
        round_idx=0,
        backend=codec.name,
        policy=None,
        planned_prefix_tokens=0,
        planned_input_tokens=len(ids),
        planned_output_tokens=1,
    )
    req = WireRequest(request_id=request_id, prompt_ids=ids, max_tokens=1, session_id=request_id)
    await transport.send(codec, req, rec)
    return rec


async def preflight_prefix_cache(
    transport: Transport,
    codec: Codec,
    pool_tail_ids: Sequence[int],
    *,
    probe_tokens: int = DEFAULT_PROBE_TOKENS,
    min_probe_tokens: int = 256,
    request_id: str = "req-frontend-preflight",
) -> PreflightResult:
    """Send the probe twice; ``BackendError`` unless the second was cached."""
    ids = list(pool_tail_ids[-probe_tokens:]) if probe_tokens > 0 else []
    if not ids:
        raise BackendError("prefix-cache preflight needs a non-empty probe prompt")
    while True:
        first = await _probe(transport, codec, ids, f"{request_id}-{len(ids)}-a")
        if _too_long(first) and len(ids) // 2 >= min_probe_tokens:
            ids = ids[len(ids) // 2 :]  # the server's context is shorter than the probe
            continue
        break
    if first.status != "ok":
        raise BackendError(f"prefix-cache preflight: the probe failed: {first.error}"
                           f"{_credentials_hint(transport, first)}")
    second = await _probe(transport, codec, ids, f"{request_id}-{len(ids)}-b")
    if second.status != "ok":
        raise BackendError(f"prefix-cache preflight: the repeated probe failed: {second.error}")
    missing, off = codec.servers.no_cached_tokens, codec.servers.cache_off
    if not second.cached_tokens_reported:
        raise BackendError(f"prefix-cache preflight: {missing}")
    if not second.cached_tokens:
        raise BackendError(
            f"prefix-cache preflight: a repeated {len(ids)}-token prompt had 0 cached tokens; {off}"
        )
    return PreflightResult(
        probe_tokens=len(ids),
        prompt_tokens=second.prompt_tokens,
        cached_tokens=second.cached_tokens or 0,
        first=first.to_dict(),
        second=second.to_dict(),
    )
