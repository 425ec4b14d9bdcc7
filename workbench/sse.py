"""Server-sent-events framing: bytes off the socket → ``data:`` payloads (the SSE spec's
line rules; ``[DONE]`` an ordinary payload), with fast paths for one-line events.
"""

from __future__ import annotations

__all__ = ["DONE", "SSEDecoder"]

DONE = b"[DONE]"


class SSEDecoder:
    """Incremental SSE decoder; ``feed`` each read, ``close`` at end of stream."""

    __slots__ = ("_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []

    def one(self, chunk: bytes) -> bytes | None:
        """The payload when ``chunk`` is exactly one one-line ``data:`` event and nothing
        is pending (the read of a streamed token); else None (use ``feed``)."""
        if (
            not self._tail
            and chunk[:6] == b"data: "
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1:] == b"\n"
            and b"\r" not in chunk
            and not self._data
        ):
            return chunk[6:-2]
        return None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Payloads of every event completed by ``chunk``."""
        one = self.one(chunk)
        if one is not None:
            return [one]
        buf = self._tail + chunk if self._tail else chunk
        if not self._data and b"\r" not in buf:
            return self._fast(buf)
        held = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # may be half of a \r\n split across reads
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop() + held
        return self._lines(lines)

    def _fast(self, buf: bytes) -> list[bytes]:
        """``\n``-only framing: one-line ``data: `` events without a line loop, anything else
        through ``_lines``; the unfinished event stays in ``_tail``."""
        parts = buf.split(b"\n\n")
        self._tail = parts.pop()
        # the usual read: only one-line "data: " events (newlines = 2 per separator)
        if buf.count(b"\n") - self._tail.count(b"\n") == 2 * len(parts) and all(
            [ev[:6] == b"data: " for ev in parts]
        ):
            return [ev[6:] for ev in parts]
        events: list[bytes] = []
        for ev in parts:
            if ev.startswith(b"data: ") and b"\n" not in ev:
                events.append(ev[6:])
            elif ev:
                events.extend(self._lines([*ev.split(b"\n"), b""]))
        return events

    @property
    def pending(self) -> int:
        """Bytes held for the event not yet ended (the output-overrun guard bounds it)."""
        data = self._data  # (empty between events: every read of a streamed answer)
        return len(self._tail) + sum(map(len, data)) if data else len(self._tail)

    def close(self) -> list[bytes]:
        """Flush at end of stream: an event missing its final blank line still counts (the
        spec would drop it, and with it a forgetful server's final usage chunk)."""
        tail, self._tail = self._tail, b""
        lines = tail.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n") if tail else []
        lines.append(b"")
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            elif line == b"data":
                data.append(b"")
            # comments (":...") and other fields are ignored
        self._data = data
        return events
