"""Time series for plots: throughput per bin, requests in flight; units holding a slot.

Times are seconds from ``t0_ns`` (default: the run's first dispatch). Output tokens are
binned at the stream events that carried them (a non-streaming answer's at its end).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.metrics.frame import Data, run_rows


def _origin(df: pd.DataFrame, t0_ns: int | None) -> int | None:
    if t0_ns is not None:
        return t0_ns
    sent = df["dispatch_ns"].dropna()
    return int(sent.min()) if len(sent) else None


def throughput_timeline(
    data: Data, bin_s: float = 1.0, *, t0_ns: int | None = None, warmup: bool = False
) -> pd.DataFrame:
    """Per bin (``t_s``: its start): ok and error completions, delivered output tokens, and
    their rates."""
    if bin_s <= 0:
        raise ValueError("bin_s must be > 0")
    df = run_rows(data, warmup=warmup)
    t0 = _origin(df, t0_ns)
    cols = ["t_s", "completed", "errors", "output_tokens", "request_rps", "output_tps"]
    if t0 is None:
        return pd.DataFrame(columns=cols)
    ends = df[df["end_ns"].notna()]
    end_s = (ends["end_ns"].astype("int64") - t0) / 1e9
    times = [(t - t0) / 1e9 for ts in df["token_times_ns"] for t in ts]
    counts = [float(c) for cs in df["token_counts"] for c in cs]
    # a whole (non-streaming) answer has no token event: its tokens arrive at its end
    whole = df[df["token_times_ns"].map(len).eq(0) & df["first_token_ns"].notna()
               & df["output_tokens"].gt(0)]
    times += [(int(t) - t0) / 1e9 for t in whole["first_token_ns"]]
    counts += [float(n) for n in whole["output_tokens"]]
    tok_t, tok_n = np.asarray(times, dtype=float), np.asarray(counts, dtype=float)
    horizon = max(
        float(end_s.max()) if len(end_s) else 0.0, float(tok_t.max()) if tok_t.size else 0.0
    )
    edges = np.arange(0.0, horizon + bin_s, bin_s)
    if edges.size < 2:
        edges = np.array([0.0, bin_s])
    ok_mask = (ends["status"] == "ok").to_numpy()
    completed = np.histogram(end_s[ok_mask], edges)[0]
    errors = np.histogram(end_s[~ok_mask], edges)[0]
    tokens = (
        np.histogram(tok_t, edges, weights=tok_n)[0] if tok_t.size else np.zeros(edges.size - 1)
    )
    return pd.DataFrame(
        {
            "t_s": edges[:-1],
            "completed": completed,
            "errors": errors,
            "output_tokens": tokens.astype(int),
            "request_rps": completed / bin_s,
            "output_tps": tokens / bin_s,
        }
    )


def _step(starts: np.ndarray, ends: np.ndarray, t0: int, name: str) -> pd.DataFrame:
    """A step function counting open intervals [start, end) at each change point."""
    times = np.unique(np.concatenate([starts, ends]))
    level = np.searchsorted(np.sort(starts), times, "right") - np.searchsorted(
        np.sort(ends), times, "right"
    )
    return pd.DataFrame({"t_s": (times - t0) / 1e9, name: level.astype(int)})


def in_flight_timeline(
    data: Data, *, t0_ns: int | None = None, warmup: bool = False
) -> pd.DataFrame:
    """Requests in flight (dispatch → end) after each change point: ``t_s``, ``in_flight``."""
    df = run_rows(data, warmup=warmup)
    df = df[df["dispatch_ns"].notna() & df["end_ns"].notna()]
    t0 = _origin(df, t0_ns)
    if t0 is None:
        return pd.DataFrame(columns=["t_s", "in_flight"])
    starts = df["dispatch_ns"].astype("int64").to_numpy()
    return _step(starts, df["end_ns"].astype("int64").to_numpy(), t0, "in_flight")


def unit_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Per ``unit_ordinal``: [admitted (else first dispatch), last end), the span a unit
    holds its slot across rounds and tool waits (docs/arrival.md)."""
    start = df["admitted_ns"].fillna(df["dispatch_ns"])
    end = df["end_ns"].fillna(df["last_token_ns"]).fillna(df["dispatch_ns"])
    spans = pd.DataFrame({"unit_ordinal": df["unit_ordinal"], "start": start, "end": end})
    spans = spans.dropna().groupby("unit_ordinal").agg(start=("start", "min"), end=("end", "max"))
    return spans.astype("int64")


def active_units_at(df: pd.DataFrame, times_ns: np.ndarray) -> np.ndarray:
    """How many units held a slot at each of ``times_ns`` (start inclusive, end exclusive)."""
    spans = unit_intervals(df)
    starts = np.sort(spans["start"].to_numpy())
    ends = np.sort(spans["end"].to_numpy())
    return np.searchsorted(starts, times_ns, "right") - np.searchsorted(ends, times_ns, "right")

