"""The per-request metrics of docs/metrics.md ("Per request", the catalog), derived once.

``derive`` is vectorised over column arrays; ``metrics.frame.to_frame`` and
``records.parquet`` (``metrics.columns.convert``) both take their columns from it. Times
are ms on the client clock from *dispatch* (the request's bytes handed to the socket). A
record with no token event whose server reported output tokens takes the runner's
``first_token_ns`` as its first token. A session is admitted once, so its later rounds
repeat their unit's ``admission_lag_ms``.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np

import workbench.catalogs.requests as catalog

NS_PER_MS = 1_000_000
#: a stream event is a token event when it carries at least this many output token ids
MIN_EVENT_TOKENS = 1

#: the raw record fields ``derive`` reads (besides the token lists)
INPUTS: tuple[str, ...] = (
    "completion_tokens", "prompt_tokens", "cached_tokens", "cached_tokens_reported",
    "first_token_ns", "dispatch_ns", "end_ns", "released_ns", "admitted_ns", "scheduled_ns",
    "sent_prompt_tokens", "planned_prefix_tokens", "planned_input_tokens",
)  # fmt: skip
#: the derived integer and float columns, in the catalog's order (``to_frame`` has all but
#: the ``itl_*`` ones; ``catalog.FRAME_COLUMNS``)
INT_COLUMNS: tuple[str, ...] = catalog.INT_COLUMNS
FLOAT_COLUMNS: tuple[str, ...] = catalog.FLOAT_COLUMNS

Opt = tuple[np.ndarray, np.ndarray]  # (int64 values, 0 where absent; validity mask)


def optional_ints(values: Sequence[Any]) -> Opt:
    """(int64 values with 0 for None, validity mask) of a list that may hold None."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False), np.ones(len(values), dtype=bool)
    n = len(values)
    if set(map(type, values)) == {int}:  # no None, no other type: numpy takes them at once
        try:
            return np.array(values, dtype=np.int64), np.ones(n, dtype=bool)
        except OverflowError:
            pass  # out of int64: as below (which raises too)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    arr = np.fromiter((v or 0 for v in values), dtype=np.int64, count=n)
    return arr, valid


def cache_reported(flag: np.ndarray, cached_valid: np.ndarray) -> np.ndarray:
    """Rows whose server reported a cached-token count: a request without one is not a zero
    hit but unreported, left out of every actual hit rate (docs/measurement-rules.md)."""
    return flag & cached_valid


def cache_measured(
    flag: np.ndarray, cached_valid: np.ndarray, prompt: np.ndarray, prompt_valid: np.ndarray
) -> np.ndarray:
    """Rows an actual hit rate is taken over: reported, with a prompt count > 0."""
    return cache_reported(flag, cached_valid) & prompt_valid & (prompt > 0)


def _ms(later: Opt, earlier: Opt) -> np.ndarray:
    out = (later[0] - earlier[0]) / NS_PER_MS
    out[~(later[1] & earlier[1])] = np.nan
    return out


#: ones to extend an int64 buffer with (a virtual run's token counts: one token an event)
_ONES = array("q", [1]) * 4096


def append_ints(buf: array[int], values: Sequence[int]) -> None:
    """``values`` onto an int64 ``buf``: a list a list at a time (``fromlist``, 2x
    ``extend``'s per-value path), a list of ones (each == 1: 1, 1.0, True) from a block of
    ones; a float elsewhere or a value out of range raises (TypeError, OverflowError),
    ``buf`` unchanged."""
    n = len(values)
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        buf.frombytes(values.tobytes())
    elif type(values) is not list:
        buf.extend(values)
    elif 0 < n <= len(_ONES) and values[0] == 1 and values.count(1) == n:
        buf.extend(_ONES[:n])
    else:
        buf.fromlist(values)


def all_ones(values: Sequence[int]) -> bool:
    """Every value is a one ``append_ints`` takes as 1: in a list it extends from a block
    of ones (1, 1.0, True), in a longer list only ints and flags (what ``fromlist`` reads
    as 1), or an int64 array of ones; so they need not be stored (``FrameStream``)."""
    if isinstance(values, np.ndarray):
        return values.dtype == np.int64 and bool((values == 1).all())
    if type(values) is not list or values.count(1) != len(values):
        return False
    return len(values) <= len(_ONES) or all(type(v) is int or type(v) is bool for v in values)


def int64_view(buf: array[int]) -> np.ndarray:
    """An int64 array over ``buf``'s memory (no copy)."""
    return np.frombuffer(buf, dtype=np.int64) if len(buf) else np.empty(0, dtype=np.int64)


def _flat(lists: Sequence[Sequence[int]], lens: np.ndarray) -> np.ndarray:
    """The first ``lens[i]`` values of each list, concatenated: a list at a time
    (``append_ints``), a list cut only when it is longer; lists with another value (a
    float: truncated) chained into ``fromiter`` (no Python step per token either way)."""
    rows = [v if len(v) == k else v[:k] for v, k in zip(lists, lens.tolist(), strict=True)]
    buf = array("q")
    try:
        for v in rows:
            append_ints(buf, v)
    except (TypeError, OverflowError):  # fromiter: a float truncated, out of range raises
        return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lens.sum()))
    return int64_view(buf)


class TokenRows:
    """Rows of token values held flat: row ``i`` is the next ``lens[i]`` of ``values``
    (int64, 8 B a token; ``frame_of_stream``), taken by ``token_stats`` for row lists."""

    def __init__(self, values: np.ndarray, lens: np.ndarray):
        self.values, self.lens = values, lens

    def __len__(self) -> int:
        return len(self.lens)

    def first(self, k: np.ndarray) -> np.ndarray:
        """The first ``k[i]`` values of each row, concatenated (``values`` itself when
        every row is whole)."""
        if np.array_equal(k, self.lens):
            return self.values
        starts = np.repeat(np.cumsum(self.lens) - self.lens, self.lens)
        at = np.arange(len(self.values)) - starts  # each value's place in its row
        return self.values[at < np.repeat(k, self.lens)]


def int_rows(lists: Sequence[Any]) -> TokenRows | None:
    """Lists of ints held flat (``TokenRows``), or None when a row is not a list or holds
    a value ``append_ints`` refuses (a float, a value out of int64's range)."""
    lens = np.fromiter((len(v) if type(v) is list else -1 for v in lists), dtype=np.int64,
                       count=len(lists))  # fmt: skip
    if (lens < 0).any():
        return None
    buf = array("q")
    try:
        for v in lists:
            append_ints(buf, v)
    except (TypeError, OverflowError):
        return None
    return TokenRows(int64_view(buf), lens)


Tokens = Sequence[Sequence[int]] | TokenRows
#: token events a pass of ``_gaps`` (8 MB of temporaries each)
GAP_CHUNK = 1 << 20


def _gaps(t: np.ndarray, same: np.ndarray) -> np.ndarray:
    """``np.diff(t)[same] / NS_PER_MS`` a chunk at a time: the result and no temporary
    as long as the run's tokens (docs/virtual-time.md, the digest's memory)."""
    out = np.empty(int(same.sum()), dtype=float)
    at = 0
    for lo in range(0, len(same), GAP_CHUNK):
        hi = min(lo + GAP_CHUNK, len(same))
        part = np.diff(t[lo : hi + 1])[same[lo:hi]] / NS_PER_MS
        out[at : at + len(part)] = part
        at += len(part)
    return out


def token_stats(times: Tokens, counts: Tokens) -> dict[str, Any]:
    """Per row: token events, first/last event time, first event's tokens, ITL stats, gaps."""
    n = len(times)
    if isinstance(times, TokenRows) and isinstance(counts, TokenRows):
        lens = np.minimum(times.lens, counts.lens)
        flat_t, flat_c = times.first(lens), counts.first(lens)
    elif isinstance(times, TokenRows) or isinstance(counts, TokenRows):
        raise TypeError("token_stats: times and counts are both TokenRows or both row lists")
    else:
        lens = np.fromiter((min(len(t), len(c)) for t, c in zip(times, counts, strict=True)),
                           dtype=np.int64, count=n)  # fmt: skip
        flat_t, flat_c = _flat(times, lens), _flat(counts, lens)
    keep = flat_c >= MIN_EVENT_TOKENS
    if keep.all():  # every event counts (a virtual run, most streams): no copies
        t, c, events = flat_t, flat_c, lens
    else:
        p = np.repeat(np.arange(n), lens)[keep]
        t, c = flat_t[keep], flat_c[keep]
        events = np.bincount(p, minlength=n)
    has = events > 0
    ends = np.cumsum(events)
    starts = ends - events
    first_t = np.zeros(n, dtype=np.int64)
    last_t = np.zeros(n, dtype=np.int64)
    first_c = np.zeros(n, dtype=np.int64)
    first_t[has] = t[starts[has]]
    last_t[has] = t[ends[has] - 1]
    first_c[has] = c[starts[has]]
    # a row's gaps are its events' differences: every difference but those across rows
    same = np.ones(max(len(t) - 1, 0), dtype=bool)
    same[ends[(ends > 0) & (ends < len(t))] - 1] = False
    gaps = _gaps(t, same)
    itl_count = np.maximum(events - 1, 0)
    itl_min = np.full(n, np.nan)
    itl_max = np.full(n, np.nan)
    rows = np.flatnonzero(itl_count)  # rows' gaps are contiguous: one reduceat each
    if len(rows):
        at = (np.cumsum(itl_count) - itl_count)[rows]
        itl_min[rows] = np.minimum.reduceat(gaps, at)
        itl_max[rows] = np.maximum.reduceat(gaps, at)
    # positive counts summed per row (all events, kept or not), exact in int64
    pos = flat_c if (flat_c > 0).all() else np.maximum(flat_c, 0)
    positive = np.zeros(n, dtype=np.int64)
    whole = np.flatnonzero(lens)  # rows with values: contiguous, one reduceat
    if len(whole):
        positive[whole] = np.add.reduceat(pos, (np.cumsum(lens) - lens)[whole])
    return {
        "events": events, "has": has, "first_t": first_t, "last_t": last_t, "first_c": first_c,
        "itl_count": itl_count, "itl_min": itl_min, "itl_max": itl_max,
        "stream_tokens": positive.astype(np.int64), "gaps": gaps,
    }  # fmt: skip


def derive(
    raw: Mapping[str, Sequence[Any]], times: Tokens, counts: Tokens
) -> dict[str, np.ndarray]:
    """The derived columns (``INT_COLUMNS``, ``FLOAT_COLUMNS``) plus ``gaps`` (every gap in
    ms, row after row) from ``raw`` (each of ``INPUTS``: one value per row, None absent) and
    the rows' ``token_times_ns``/``token_counts`` (lists, or ``TokenRows``)."""
    n = len(times)
    tok = token_stats(times, counts)
    opt = {k: optional_ints(raw[k]) for k in (
        "completion_tokens", "prompt_tokens", "cached_tokens", "first_token_ns", "dispatch_ns",
        "end_ns", "released_ns", "admitted_ns", "scheduled_ns")}  # fmt: skip
    comp, comp_ok = opt["completion_tokens"]
    n_out = np.where(comp_ok, comp, tok["stream_tokens"])
    prompt, prompt_ok = opt["prompt_tokens"]
    sent = optional_ints(raw["sent_prompt_tokens"])[0]
    pre = optional_ints(raw["planned_prefix_tokens"])[0]
    planned_prompt = pre + optional_ints(raw["planned_input_tokens"])[0]
    prompt_len = np.where(prompt_ok, prompt, np.where(sent != 0, sent, planned_prompt))
    fallback_first = opt["first_token_ns"][1] & (n_out > 0)
    first = (np.where(tok["has"], tok["first_t"], opt["first_token_ns"][0]),
             tok["has"] | fallback_first)  # fmt: skip
    last = (tok["last_t"], tok["has"])
    ttft = _ms(first, opt["dispatch_ns"])
    e2e = _ms(opt["end_ns"], opt["dispatch_ns"])
    denom = np.where(tok["has"], n_out - tok["first_c"], 0)
    ok_tpot = (tok["events"] >= 2) & (denom > 0)
    tpot = np.full(n, np.nan)
    tpot[ok_tpot] = (tok["last_t"] - tok["first_t"])[ok_tpot] / NS_PER_MS / denom[ok_tpot]
    flags = np.fromiter((bool(v) for v in raw["cached_tokens_reported"]), dtype=bool, count=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        # a record without a token event (a non-streaming answer: TTFT = E2E) has no
        # time between its first and last token to amortize: absent, not 0
        amort = np.where((n_out >= 2) & tok["has"], (e2e - ttft) / (n_out - 1), np.nan)
        planned_hit = np.where(planned_prompt > 0, pre / planned_prompt, np.nan)
        cached, cached_ok = opt["cached_tokens"]
        measured = cache_measured(flags, cached_ok, prompt, prompt_ok)
        actual = np.where(measured, cached / prompt, np.nan)
    itl_sum = np.where(tok["itl_count"] > 0, (tok["last_t"] - tok["first_t"]) / NS_PER_MS, 0.0)
    return _computed({
        "output_tokens": n_out, "planned_prompt_tokens": planned_prompt, "prompt_len": prompt_len,
        "first_event_tokens": tok["first_c"], "token_events": tok["events"],
        "itl_count": tok["itl_count"], "ttft_ms": ttft, "tpot_ms": tpot,
        "terminal_tail_ms": _ms(opt["end_ns"], last), "e2e_ms": e2e,
        "completion_amortized_tpot_ms": amort, "actual_hit": actual, "planned_hit": planned_hit,
        "arrival_release_lag_ms": _ms(opt["released_ns"], opt["scheduled_ns"]),
        "admission_lag_ms": _ms(opt["admitted_ns"], opt["scheduled_ns"]),
        "itl_sum_ms": itl_sum, "itl_min_ms": tok["itl_min"], "itl_max_ms": tok["itl_max"],
        "gaps": tok["gaps"],
    })  # fmt: skip


def _computed(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``cols`` with the catalog's computed metrics added (``Metric.compute``, in row
    order, so a row may use the ones before it)."""
    for m in catalog.CATALOG:
        if m.compute is not None:
            cols[m.name] = np.asarray(m.compute(cols), dtype=np.int64 if m.kind == "int" else float)
    return cols


def split_gaps(gaps: np.ndarray, itl_count: np.ndarray) -> list[list[float]]:
    """``gaps`` back into one list per row (the ``itl_ms`` column of ``to_frame``)."""
    return [g.tolist() for g in np.split(gaps, np.cumsum(itl_count)[:-1])] if len(itl_count) else []
