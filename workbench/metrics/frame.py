"""Per-request metrics: ``RequestRecord`` → one DataFrame row.

Records keep raw integer-ns timestamps; every number here is derived from them
by pure arithmetic, so a stored run can be re-measured with newer definitions.
The metric names are docs/metrics.md's and must not drift: reports and ``summary.json``
use them verbatim.

Definitions (times in ms, from the client clock). *Dispatch* (``dispatch_ns``) is
when the request's bytes were handed to the socket (the live transport stamps it
as it writes them), so the client's own preparation of a request counts as its
release lag (``summary["client"]``), not as server latency:

- ``ttft_ms``: dispatch → first stream event carrying ≥ 1 output token id. An
  event with a count of 0 (role-only or empty chunk) does not count. When a
  record has no per-event trace at all but the server reported output tokens,
  the runner's ``first_token_ns`` is used instead.
- ``tpot_ms`` (token-delivery cadence): (last token event − first token event) /
  (output tokens − tokens in the first event). NaN when there is one token event
  or the denominator is ≤ 0: a single burst has no measurable cadence.
- ``itl_ms``: list of gaps between consecutive token events.
- ``terminal_tail_ms``: last token event → end of stream.
- ``e2e_ms``: dispatch → end of stream.
- ``completion_amortized_tpot_ms``: (e2e − ttft)/(n − 1), an audit figure only.
- ``arrival_release_lag_ms``: scheduled arrival → released (task running).
- ``admission_lag_ms``: scheduled arrival → admitted (slot granted), so it
  *includes* the release lag (docs/arrival.md "arrival → slot granted"). A session is
  admitted once, so later rounds repeat their unit's admission time.
- ``output_tokens``: server ``completion_tokens`` when reported, else Σ token_counts.
- ``actual_hit`` = cached/prompt_tokens, NaN when the server did not report a
  cached count (``cached_tokens_reported`` False: not a zero hit, see
  ``cache_reported``), ``planned_hit`` = p/(p+i), ``hit_delta`` = actual − planned.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from workbench.records import RequestRecord, RunResult

NS_PER_MS = 1_000_000
NAN = math.nan

RAW_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RequestRecord))
NS_COLUMNS: tuple[str, ...] = tuple(
    c for c in RAW_COLUMNS if c.endswith("_ns") and c != "token_times_ns"
)
DERIVED_COLUMNS: tuple[str, ...] = (
    "output_tokens",
    "planned_prompt_tokens",
    "prompt_len",
    "first_event_tokens",
    "token_events",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "terminal_tail_ms",
    "e2e_ms",
    "completion_amortized_tpot_ms",
    "actual_hit",
    "planned_hit",
    "hit_delta",
    "arrival_release_lag_ms",
    "admission_lag_ms",
)
COLUMNS: tuple[str, ...] = RAW_COLUMNS + DERIVED_COLUMNS

Data = RunResult | Iterable[RequestRecord | Mapping[str, Any]] | pd.DataFrame


def as_records(
    data: RunResult | Iterable[RequestRecord | Mapping[str, Any]],
) -> list[RequestRecord]:
    """Records from a RunResult, a list of records, or a list of record dicts.

    A run that kept its records on disk only (``RunResult.records_on_disk``) is
    read back from its ``records.jsonl`` here, on demand: nothing is held by the result.
    """
    if isinstance(data, RunResult) and data.records_on_disk:
        from workbench.storage.rundir import load_records

        return load_records(data.run_dir or "")
    items = data.records if isinstance(data, RunResult) else data
    return [r if isinstance(r, RequestRecord) else RequestRecord.from_dict(r) for r in items]


def _ms(later: int | None, earlier: int | None) -> float:
    if later is None or earlier is None:
        return NAN
    return (later - earlier) / NS_PER_MS


def token_events(rec: RequestRecord) -> tuple[list[int], list[int]]:
    """(times, counts) of the stream events that carried ≥ 1 output token id."""
    pairs = [(t, c) for t, c in zip(rec.token_times_ns, rec.token_counts, strict=False) if c >= 1]
    return [t for t, _ in pairs], [c for _, c in pairs]


def output_tokens(rec: RequestRecord) -> int:
    """Server-reported completion tokens, else what the stream delivered."""
    if rec.completion_tokens is not None:
        return int(rec.completion_tokens)
    return int(sum(c for c in rec.token_counts if c > 0))


def prompt_len(rec: RequestRecord) -> int:
    """The prompt as the server counted it, else as sent, else as planned."""
    if rec.prompt_tokens is not None:
        return int(rec.prompt_tokens)
    if rec.sent_prompt_tokens:
        return int(rec.sent_prompt_tokens)
    return rec.planned_prefix_tokens + rec.planned_input_tokens


def _timing(rec: RequestRecord, n_out: int) -> dict[str, Any]:
    times, counts = token_events(rec)
    first = times[0] if times else (rec.first_token_ns if n_out > 0 else None)
    last = times[-1] if times else None
    ttft = _ms(first, rec.dispatch_ns)
    e2e = _ms(rec.end_ns, rec.dispatch_ns)
    denom = n_out - counts[0] if counts else 0
    tpot = _ms(last, first) / denom if len(times) >= 2 and denom > 0 else NAN
    amortized = (e2e - ttft) / (n_out - 1) if n_out >= 2 else NAN
    return {
        "first_event_tokens": counts[0] if counts else 0,
        "token_events": len(times),
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "itl_ms": [(b - a) / NS_PER_MS for a, b in itertools.pairwise(times)],
        "terminal_tail_ms": _ms(rec.end_ns, last),
        "e2e_ms": e2e,
        "completion_amortized_tpot_ms": amortized,
        "arrival_release_lag_ms": _ms(rec.released_ns, rec.scheduled_ns),
        "admission_lag_ms": _ms(rec.admitted_ns, rec.scheduled_ns),
    }


def _prefix(rec: RequestRecord) -> dict[str, Any]:
    planned_prompt = rec.planned_prefix_tokens + rec.planned_input_tokens
    planned = rec.planned_prefix_tokens / planned_prompt if planned_prompt > 0 else NAN
    actual = NAN
    if rec.cached_tokens_reported and rec.cached_tokens is not None and rec.prompt_tokens:
        actual = rec.cached_tokens / rec.prompt_tokens
    return {
        "planned_prompt_tokens": planned_prompt,
        "actual_hit": actual,
        "planned_hit": planned,
        "hit_delta": actual - planned,
    }


def request_metrics(rec: RequestRecord) -> dict[str, Any]:
    """Every derived per-request metric of one record (docs/metrics.md names)."""
    n_out = output_tokens(rec)
    return {
        "output_tokens": n_out,
        "prompt_len": prompt_len(rec),
        **_timing(rec, n_out),
        **_prefix(rec),
    }


def to_frame(data: Data) -> pd.DataFrame:
    """One row per request: the raw record fields plus the derived metrics.

    ``*_ns`` columns are nullable ``Int64`` so absent moments stay exact (float
    would round large ns values). A DataFrame is returned unchanged, so every
    helper here accepts a result, a record list or an existing frame.
    """
    if isinstance(data, pd.DataFrame):
        return data
    rows = [{**rec.to_dict(), **request_metrics(rec)} for rec in as_records(data)]
    df = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    for col in NS_COLUMNS:
        df[col] = df[col].astype("Int64")
    for col in ("warmup", "cached_tokens_reported"):
        df[col] = df[col].astype(bool)
    return df


def cache_reported(df: pd.DataFrame) -> pd.Series:
    """Rows whose server reported a cached-token count (docs/measurement-rules.md).

    A request whose server sent no cached count (vLLM without
    ``--enable-prompt-tokens-details``, a usage block without details) is *not* a
    zero hit: it is left out of every actual hit rate and counted as unreported.
    """
    return df["cached_tokens_reported"].astype(bool) & df["cached_tokens"].notna()


def cache_measured(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok rows an actual hit rate is taken over: reported, with a prompt count > 0."""
    return ok[cache_reported(ok) & (ok["prompt_tokens"].fillna(0) > 0)]


def run_rows(data: Data, *, warmup: bool = False) -> pd.DataFrame:
    """The frame with warmup records dropped unless ``warmup`` (they are not the run)."""
    df = to_frame(data)
    return df if warmup else df[~df["warmup"]]
