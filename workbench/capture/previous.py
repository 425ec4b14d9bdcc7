"""What the capture keeps of the Responses API answers it recorded, so that a later
request naming one of them (``previous_response_id``: the server holds the earlier
items, the request sends only its new ones) is recorded with its whole prompt: per
answer, salted digests and the ids of at most one partial block — never text
(docs/capture.md, "The Responses API").
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

#: the answers kept (the newest): an agent names the answer it just got
MAX_KEPT = 256

#: an answer's prompt and output as token blocks: the digests of its full blocks and the
#: ids of its last, partial one; None when its own prefix was unknown, or not recorded
Blocks = tuple[list[bytes], list[int]] | None


@dataclass(slots=True, eq=False)
class Earlier:
    """One recorded answer: the digest of its request's preamble (``instructions`` and
    ``tools``, which the server does not carry over), the session chain through its
    request's items and its output items, and its blocks once hashed."""

    preamble: bytes
    chain: list[bytes]
    blocks: asyncio.Future[Blocks]


class Answers:
    """The last ``MAX_KEPT`` answers by response id."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self._kept: OrderedDict[str, Earlier] = OrderedDict()
        self._limit = limit

    def get(self, response_id: str) -> Earlier | None:
        return self._kept.get(response_id) if response_id else None

    def put(self, response_id: str, earlier: Earlier) -> None:
        self._kept[response_id] = earlier
        self._kept.move_to_end(response_id)
        while len(self._kept) > self._limit:
            _, dropped = self._kept.popitem(last=False)
            if not dropped.blocks.done():  # a request awaiting it records no prefix
                dropped.blocks.set_result(None)
