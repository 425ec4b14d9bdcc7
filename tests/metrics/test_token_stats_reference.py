"""``derive.token_stats`` (flattened, one pass per column) against the obvious per-row
reading: events of at least MIN_EVENT_TOKENS tokens, their first/last times, the gaps
between them in ms with their min and max, and every positive count summed."""

from __future__ import annotations

import random
from itertools import pairwise

import numpy as np

from workbench.metrics import derive
from workbench.metrics.derive import MIN_EVENT_TOKENS, NS_PER_MS, token_stats


def _row(times: list[int], counts: list[int]) -> dict[str, object]:
    k = min(len(times), len(counts))
    ev = [(t, c) for t, c in zip(times[:k], counts[:k], strict=True) if c >= MIN_EVENT_TOKENS]
    gaps = [(b[0] - a[0]) / NS_PER_MS for a, b in pairwise(ev)]
    return {"events": len(ev), "has": bool(ev), "first_t": ev[0][0] if ev else 0,
            "last_t": ev[-1][0] if ev else 0, "first_c": ev[0][1] if ev else 0,
            "itl_count": len(gaps), "itl_min": min(gaps) if gaps else np.nan,
            "itl_max": max(gaps) if gaps else np.nan,
            "stream_tokens": sum(c for c in counts[:k] if c > 0), "gaps": gaps}  # fmt: skip


def test_token_stats_equal_the_per_row_reading() -> None:
    rng = random.Random(4)
    for _ in range(500):
        times, counts = [], []
        for _ in range(rng.randint(0, 9)):  # empty rows, rows of one event, uneven lists
            k = rng.choice([0, 0, 1, 2, 5, 12])
            times.append(sorted(rng.randint(0, 10**10) for _ in range(k)))
            counts.append([rng.choice([1, 1, 1, 0, 2, 7]) for _ in range(max(0, k + rng.choice(
                [0, 0, 1, -1])))])  # fmt: skip
        got = token_stats(times, counts)
        want = [_row(t, c) for t, c in zip(times, counts, strict=True)]
        for key in ("events", "has", "first_t", "last_t", "first_c", "itl_count",
                    "itl_min", "itl_max", "stream_tokens"):  # fmt: skip
            assert np.array_equal(got[key], np.array([w[key] for w in want]), equal_nan=True), key
        assert got["gaps"].tolist() == [g for w in want for g in w["gaps"]]  # type: ignore[attr-defined]


def test_flat_token_rows_and_chunked_gaps_give_the_same(monkeypatch) -> None:
    """``TokenRows`` (the rows held flat, ``frame_of_stream``) and gaps taken a few events
    at a time (``GAP_CHUNK``) give exactly what the row lists give."""
    monkeypatch.setattr(derive, "GAP_CHUNK", 3)
    rng = random.Random(7)
    for _ in range(300):
        times, counts = [], []
        for _ in range(rng.randint(0, 9)):
            k = rng.choice([0, 0, 1, 2, 5, 12])
            times.append(sorted(rng.randint(0, 10**10) for _ in range(k)))
            counts.append([rng.choice([1, 1, 1, 0, -1, 2, 7]) for _ in range(max(0, k + rng.choice(
                [0, 0, 1, -1])))])  # fmt: skip
        flat = [derive.TokenRows(np.array([v for row in rows for v in row], dtype=np.int64),
                                 np.array([len(row) for row in rows], dtype=np.int64))
                for rows in (times, counts)]  # fmt: skip
        got = token_stats(*flat)
        want = [_row(t, c) for t, c in zip(times, counts, strict=True)]
        for key in ("events", "first_t", "last_t", "first_c", "itl_count", "itl_min",
                    "itl_max", "stream_tokens"):  # fmt: skip
            assert np.array_equal(got[key], np.array([w[key] for w in want]), equal_nan=True), key
        assert got["gaps"].tolist() == [g for w in want for g in w["gaps"]]
        assert got["gaps"].tolist() == token_stats(times, counts)["gaps"].tolist()
