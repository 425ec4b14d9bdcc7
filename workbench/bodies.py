"""Every body read from a server outside the measured stream, read under a bound:
``read_body`` inflates piece by piece (``Inflater``, the HTTP clients' too) and drops
the connection at the bound (docs/security.md, "Bounded inputs").
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ANSWER_MAX", "INFLATE_PIECE", "PAGE_MAX", "Body", "BodyError", "Inflater",
           "read_body", "session"]

#: a compressed body is inflated at most this many bytes at a time (``Inflater``)
INFLATE_PIECE = 64 * 1024

#: a Prometheus page (vLLM's ~100 KB, a DCGM exporter's for 8 GPUs ~300 KB)
PAGE_MAX = 16 * 2**20
#: any other answer: the clients' error-body bound (the capture proxy's /tokenize: its own)
ANSWER_MAX = 64 * 1024

ENCODINGS = ("gzip", "x-gzip", "deflate")


class BodyError(WorkbenchError):
    """A body that does not inflate, or an encoding workbench cannot decode."""


class Inflater:
    """A ``gzip``/``deflate`` body inflated piece by piece: ``pieces(data)`` yields one
    network read's bytes ``INFLATE_PIECE`` at a time, so a caller that stops taking them
    never holds a bomb whole (docs/wire-protocols.md). A broken body raises ``error``."""

    __slots__ = ("encoding", "z")
    error: type[Exception] = BodyError

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.z = zlib.decompressobj(wbits=47)  # zlib or gzip header

    def pieces(self, data: bytes) -> Iterator[bytes]:
        z = self.z
        buf = data
        while True:
            try:
                out = z.decompress(buf, INFLATE_PIECE)
            except zlib.error as exc:
                raise self.error(f"a {self.encoding} body that does not inflate: {exc}") \
                    from None
            if out:
                yield out
            buf = z.unconsumed_tail
            if not buf and len(out) < INFLATE_PIECE:
                return


@dataclass(frozen=True)
class Body:
    """What was read: ``data`` (at most the limit, inflated) and whether more came."""

    data: bytes
    cut: bool

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def session(**kwargs: Any) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` that leaves compressed bodies to ``read_body``."""
    import aiohttp

    return aiohttp.ClientSession(auto_decompress=False, **kwargs)


def _inflater(headers: Mapping[str, str]) -> Inflater | None:
    enc = headers.get("Content-Encoding", "").strip().lower()
    if not enc or enc == "identity":
        return None
    if enc in ENCODINGS:
        return Inflater(enc)
    raise BodyError(f"the server sent content-encoding {enc!r}, which workbench cannot "
                       "decode (supported: gzip, deflate)")


async def read_body(resp: aiohttp.ClientResponse, limit: int = ANSWER_MAX,
                    inflater: Inflater | bool | None = True) -> Body:
    """At most ``limit`` bytes of ``resp``'s body, inflated (``inflater``: the caller's, None
    or from ``Content-Encoding``); ``BodyError`` for a broken body or another encoding."""
    inflate = _inflater(resp.headers) if inflater is True else inflater or None
    out = bytearray()
    cut = False
    async for chunk in resp.content.iter_chunked(INFLATE_PIECE):
        for piece in (inflate.pieces(chunk) if inflate is not None else (chunk,)):
            room = limit - len(out)
            if len(piece) > room:
                out += piece[:room]
                cut = True
                break
            out += piece
        if cut:
            break
    if cut:
        resp.close()  # the rest is not read: the connection cannot be reused
    return Body(bytes(out), cut)
