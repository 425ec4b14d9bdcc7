"""Columnar copy of a run's records: ``records.parquet`` beside ``records.jsonl``.

``records.jsonl`` stays the source of truth (crash-safe, appended line by line,
every field). For a run of millions of requests a report must not parse it into
``RequestRecord`` objects and a pandas frame at once, so the same records are
also written as Parquet, flattened, with the per-request metrics of docs/metrics.md
already derived:

- every scalar field of ``RequestRecord`` (ids, plan, raw ``*_ns`` timestamps as
  nullable int64, server usage, status, error);
- the derived columns of ``workbench.metrics.frame`` except the ``itl_ms`` list:
  ``output_tokens``, ``planned_prompt_tokens``, ``prompt_len``,
  ``first_event_tokens``, ``token_events``, ``ttft_ms``, ``tpot_ms``,
  ``terminal_tail_ms``, ``e2e_ms``, ``completion_amortized_tpot_ms``,
  ``actual_hit``, ``planned_hit``, ``hit_delta``, ``arrival_release_lag_ms``,
  ``admission_lag_ms`` — NaN where ``to_frame`` has NaN;
- inter-token latency as per-request statistics: ``itl_count`` (gaps),
  ``itl_sum_ms`` (= last − first token event), ``itl_min_ms``, ``itl_max_ms``.

**Token-time lists are dropped by default** (``token_times=False``): they are
most of the bytes (one int per stream event) and only the pooled ``itl_ms``
percentiles need them; the mean, min, max and count of ``itl_ms`` stay exact
from the per-request statistics. ``token_times=True`` keeps ``token_times_ns``
and ``token_counts`` as ``list<int64>`` and the gaps as ``itl_ms``
(``list<double>``) so ``workbench.metrics.scan`` can pool every gap (DuckDB
``unnest``). ``extra`` (block hashes, backend specifics) is not
copied; read the JSONL for it.

Conversion streams: the JSONL is read in batches of ``batch_rows`` lines (orjson
per line — the only per-row Python), each batch becomes an Arrow table whose
metric columns are computed with numpy over the flattened token lists, and is
appended to the Parquet file as one row group. Memory is bounded by one batch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import ConfigError

log = logging.getLogger(__name__)

PARQUET = "records.parquet"
BATCH_ROWS = 8_192
NS_PER_MS = 1_000_000

INSTALL_HINT = "pip install 'workbench[large]'  (pyarrow and duckdb)"

INT_FIELDS: tuple[str, ...] = (
    "unit_ordinal", "round_idx", "planned_prefix_tokens", "planned_input_tokens",
    "planned_output_tokens", "folded_prefix_tokens", "derived_prefix",
    "prefix_shortfall_tokens", "sent_prompt_tokens", "scheduled_ns", "released_ns",
    "admitted_ns", "dispatch_ns", "first_token_ns", "last_token_ns", "end_ns", "http_status",
    "prompt_tokens", "completion_tokens", "cached_tokens", "echoed_prompt_tokens",
    "routing_slot", "schema",
)  # fmt: skip
STR_FIELDS: tuple[str, ...] = (
    "run_id", "request_id", "session_id", "backend", "policy", "finish_reason",
    "server_request_id", "status", "error",
)  # fmt: skip
BOOL_FIELDS: tuple[str, ...] = ("cached_tokens_reported", "warmup")
DEFAULTS: dict[str, Any] = {
    "folded_prefix_tokens": 0, "derived_prefix": 0, "prefix_shortfall_tokens": 0,
    "sent_prompt_tokens": 0, "echoed_prompt_tokens": 0, "schema": 1, "status": "ok",
    "cached_tokens_reported": False, "warmup": False,
}  # fmt: skip
FLOAT_COLUMNS: tuple[str, ...] = (
    "ttft_ms", "tpot_ms", "terminal_tail_ms", "e2e_ms", "completion_amortized_tpot_ms",
    "actual_hit", "planned_hit", "hit_delta", "arrival_release_lag_ms", "admission_lag_ms",
    "itl_sum_ms", "itl_min_ms", "itl_max_ms",
)  # fmt: skip
DERIVED_INT_COLUMNS: tuple[str, ...] = (
    "output_tokens", "planned_prompt_tokens", "prompt_len", "first_event_tokens",
    "token_events", "itl_count",
)  # fmt: skip


def require() -> Any:
    """``pyarrow`` (and ``pyarrow.parquet``), or a ConfigError that says how to install it."""
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"large-run analysis needs pyarrow: {INSTALL_HINT}") from None
    return pa


def schema(token_times: bool = False) -> Any:
    """The Arrow schema of ``records.parquet``."""
    pa = require()
    fields = [pa.field(n, pa.string()) for n in STR_FIELDS[:4]]
    fields += [pa.field(n, pa.int64()) for n in INT_FIELDS]
    fields += [pa.field(n, pa.string()) for n in STR_FIELDS[4:]]
    fields += [pa.field(n, pa.bool_()) for n in BOOL_FIELDS]
    fields += [pa.field(n, pa.int64()) for n in DERIVED_INT_COLUMNS]
    fields += [pa.field(n, pa.float64()) for n in FLOAT_COLUMNS]
    if token_times:
        fields += [pa.field(n, pa.list_(pa.int64())) for n in ("token_times_ns", "token_counts")]
        fields.append(pa.field("itl_ms", pa.list_(pa.float64())))
    return pa.schema(fields)


# ------------------------------------------------------------ vectorized metrics
def _opt(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 for None, validity mask)."""
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    arr = np.fromiter((v or 0 for v in values), dtype=np.int64, count=len(values))
    return arr, valid


def _ms(later: tuple[np.ndarray, np.ndarray], earlier: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    out = (later[0] - earlier[0]) / NS_PER_MS
    out[~(later[1] & earlier[1])] = np.nan
    return out


def _token_stats(
    times: list[list[int]], counts: list[list[int]]
) -> dict[str, np.ndarray]:
    """Per-row first/last token event, event count, tokens, ITL stats — numpy over flat lists."""
    n = len(times)
    lens = np.fromiter((min(len(t), len(c)) for t, c in zip(times, counts, strict=True)),
                       dtype=np.int64, count=n)  # fmt: skip
    total = int(lens.sum())
    flat_t = np.fromiter((x for t, k in zip(times, lens, strict=True) for x in t[:k]),
                         dtype=np.int64, count=total)  # fmt: skip
    flat_c = np.fromiter((x for c, k in zip(counts, lens, strict=True) for x in c[:k]),
                         dtype=np.int64, count=total)  # fmt: skip
    parent = np.repeat(np.arange(n), lens)
    keep = flat_c >= 1
    t, c, p = flat_t[keep], flat_c[keep], parent[keep]
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
    gaps = np.diff(t) / NS_PER_MS if t.size else np.empty(0)
    same = p[1:] == p[:-1] if t.size else np.empty(0, dtype=bool)
    gaps, gp = gaps[same], p[1:][same]
    itl_min = np.full(n, np.inf)
    itl_max = np.full(n, -np.inf)
    np.minimum.at(itl_min, gp, gaps)
    np.maximum.at(itl_max, gp, gaps)
    itl_count = np.maximum(events - 1, 0)
    itl_min[itl_count == 0] = np.nan
    itl_max[itl_count == 0] = np.nan
    positive = np.bincount(parent, weights=np.where(flat_c > 0, flat_c, 0), minlength=n)
    return {
        "events": events, "has": has, "first_t": first_t, "last_t": last_t, "first_c": first_c,
        "itl_count": itl_count, "itl_min": itl_min, "itl_max": itl_max,
        "stream_tokens": positive.astype(np.int64), "gaps": gaps,
    }  # fmt: skip


def _derive(rows: list[Mapping[str, Any]], cols: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """The derived columns of ``metrics.frame`` for one batch, vectorized (same definitions)."""
    tok = _token_stats([r.get("token_times_ns") or [] for r in rows],
                       [r.get("token_counts") or [] for r in rows])  # fmt: skip
    opt = {k: _opt(cols[k]) for k in (
        "completion_tokens", "prompt_tokens", "cached_tokens", "first_token_ns", "dispatch_ns",
        "end_ns", "released_ns", "admitted_ns", "scheduled_ns")}  # fmt: skip
    comp, comp_ok = opt["completion_tokens"]
    n_out = np.where(comp_ok, comp, tok["stream_tokens"])
    prompt, prompt_ok = opt["prompt_tokens"]
    sent = np.asarray(cols["sent_prompt_tokens"], dtype=np.int64)
    pre = np.asarray(cols["planned_prefix_tokens"], dtype=np.int64)
    planned_prompt = pre + np.asarray(cols["planned_input_tokens"], dtype=np.int64)
    prompt_len = np.where(prompt_ok, prompt, np.where(sent != 0, sent, planned_prompt))
    fallback_first = opt["first_token_ns"][1] & (n_out > 0)
    first = (np.where(tok["has"], tok["first_t"], opt["first_token_ns"][0]),
             tok["has"] | fallback_first)
    last = (tok["last_t"], tok["has"])
    ttft = _ms(first, opt["dispatch_ns"])
    e2e = _ms(opt["end_ns"], opt["dispatch_ns"])
    denom = np.where(tok["has"], n_out - tok["first_c"], 0)
    ok_tpot = (tok["events"] >= 2) & (denom > 0)
    tpot = np.full(len(rows), np.nan)
    tpot[ok_tpot] = (tok["last_t"] - tok["first_t"])[ok_tpot] / NS_PER_MS / denom[ok_tpot]
    with np.errstate(divide="ignore", invalid="ignore"):
        amort = np.where(n_out >= 2, (e2e - ttft) / (n_out - 1), np.nan)
        planned_hit = np.where(planned_prompt > 0, pre / planned_prompt, np.nan)
        cached, cached_ok = opt["cached_tokens"]
        reported = np.asarray(cols["cached_tokens_reported"], dtype=bool) & cached_ok
        actual = np.where(reported & prompt_ok & (prompt != 0), cached / prompt, np.nan)
    itl_sum = np.where(tok["itl_count"] > 0, (tok["last_t"] - tok["first_t"]) / NS_PER_MS, 0.0)
    return {
        "output_tokens": n_out, "planned_prompt_tokens": planned_prompt, "prompt_len": prompt_len,
        "first_event_tokens": tok["first_c"], "token_events": tok["events"],
        "itl_count": tok["itl_count"], "ttft_ms": ttft, "tpot_ms": tpot,
        "terminal_tail_ms": _ms(opt["end_ns"], last), "e2e_ms": e2e,
        "completion_amortized_tpot_ms": amort, "actual_hit": actual, "planned_hit": planned_hit,
        "hit_delta": actual - planned_hit,
        "arrival_release_lag_ms": _ms(opt["released_ns"], opt["scheduled_ns"]),
        "admission_lag_ms": _ms(opt["admitted_ns"], opt["scheduled_ns"]),
        "itl_sum_ms": itl_sum, "itl_min_ms": tok["itl_min"], "itl_max_ms": tok["itl_max"],
        "_gaps": tok["gaps"],
    }  # fmt: skip


INT64_MAX = 2**63 - 1


def _sound_int(v: Any) -> bool:
    return v is None or (type(v) is int and -INT64_MAX <= v <= INT64_MAX)


def _sanitized(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows whose integer fields are all ints in int64 range (others become null).

    Records written by this version never hold such values (``backends.base.usage_count``
    fails the request instead), but a file from an older version or another tool may:
    the conversion keeps going, nulls the bad value and says which row had it.
    """
    out: list[Mapping[str, Any]] = []
    for i, r in enumerate(rows):
        bad = [k for k in INT_FIELDS if not _sound_int(r.get(k))]
        bad += [k for k in ("token_times_ns", "token_counts")
                if not all(_sound_int(x) and x is not None for x in r.get(k) or ())]
        texts = [k for k in STR_FIELDS if not isinstance(r.get(k), str | None)]
        flags = [k for k in BOOL_FIELDS if not isinstance(r.get(k), bool | None)]
        if not (bad or texts or flags):
            out.append(r)
            continue
        log.warning("record %s (batch row %d): %s of the wrong type or range; stored as "
                    "null (text: as its string)", r.get("request_id"), i,
                    ", ".join([*bad, *texts, *flags]))
        fixed = dict(r)
        fixed.update({k: str(r[k]) for k in texts})
        fixed.update({k: None for k in flags})
        for k in bad:
            fixed[k] = [] if k in ("token_times_ns", "token_counts") else None
        out.append(fixed)
    return out


def batch_table(rows: list[Mapping[str, Any]], *, token_times: bool = False) -> Any:
    """One Arrow table (schema ``schema(token_times)``) from record dicts.

    A batch with a value that cannot be an int64 (``"many"``, ``10**30``) is
    converted again with such values nulled (``_sanitized``), never dropped.
    """
    pa = require()
    try:
        return _batch_table(pa, rows, token_times)
    except (OverflowError, TypeError, ValueError, pa.ArrowException):
        return _batch_table(pa, _sanitized(rows), token_times)


def _batch_table(pa: Any, rows: list[Mapping[str, Any]], token_times: bool) -> Any:
    sch = schema(token_times)
    cols: dict[str, list[Any]] = {
        name: [r.get(name, DEFAULTS.get(name)) for r in rows]
        for name in (*STR_FIELDS, *INT_FIELDS, *BOOL_FIELDS)
    }
    derived = _derive(rows, cols)
    arrays = []
    for f in sch:
        if f.name == "itl_ms":  # the gaps are already grouped by row, in order
            offsets = np.concatenate(([0], np.cumsum(derived["itl_count"]))).astype(np.int32)
            arrays.append(pa.ListArray.from_arrays(offsets, pa.array(derived["_gaps"])))
        elif f.name in derived:
            arrays.append(pa.array(derived[f.name], type=f.type, from_pandas=True))
        elif f.name in cols:
            arrays.append(pa.array(cols[f.name], type=f.type))
        else:  # token lists
            arrays.append(pa.array([r.get(f.name) or [] for r in rows], type=f.type))
    return pa.Table.from_arrays(arrays, schema=sch)


# ------------------------------------------------------------------ files
def iter_jsonl_batches(path: str | Path, batch_rows: int = BATCH_ROWS) -> Iterator[list[Any]]:
    """Parsed lines of a JSONL file in lists of ``batch_rows``; a cut last line is skipped."""
    from workbench.storage.rundir import loads_line

    batch: list[Any] = []
    with open(path, "rb") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                batch.append(loads_line(line))
            except ValueError:
                if line.endswith(b"\n"):
                    raise ValueError(f"{path}:{i + 1}: invalid JSON line") from None
                log.warning("%s: skipping truncated last line %d", path, i + 1)
                continue
            if len(batch) >= batch_rows:
                yield batch
                batch = []
    if batch:
        yield batch


def write_parquet(
    rows: Iterable[Iterable[Mapping[str, Any]]],
    out: str | Path,
    *,
    token_times: bool = False,
) -> int:
    """Write batches of record dicts (or ``RequestRecord``s) as one Parquet file, atomically."""
    require()
    import pyarrow.parquet as pq

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    n = 0
    with pq.ParquetWriter(tmp, schema(token_times), compression="zstd") as writer:
        for batch in rows:
            dicts = [r.to_dict() if hasattr(r, "to_dict") else r for r in batch]
            if dicts:
                writer.write_table(batch_table(dicts, token_times=token_times))
                n += len(dicts)
    os.replace(tmp, out)
    return n


def convert(
    run_dir: str | Path,
    *,
    token_times: bool = False,
    batch_rows: int = BATCH_ROWS,
    out: str | Path | None = None,
) -> Path:
    """``run_dir/records.jsonl`` → ``run_dir/records.parquet`` in streaming batches."""
    from workbench.storage.rundir import RECORDS, resolve_run_dir

    d = resolve_run_dir(run_dir)
    target = Path(out) if out is not None else d / PARQUET
    n = write_parquet(iter_jsonl_batches(d / RECORDS, batch_rows), target, token_times=token_times)
    log.info("%s: %d records → %s", d, n, target.name)
    return target


def save_records(records: Iterable[Any], run_dir: str | Path, *, token_times: bool = False) -> Path:
    """Write in-memory records (``RequestRecord`` or dicts) as ``run_dir/records.parquet``."""
    items = list(records)
    out = Path(run_dir) / PARQUET
    write_parquet(
        (items[i : i + BATCH_ROWS] for i in range(0, len(items), BATCH_ROWS)),
        out,
        token_times=token_times,
    )
    return out


def parquet_path(run_dir: str | Path, *, token_times: bool | None = None) -> Path:
    """The run's ``records.parquet``, (re)built first when missing or older than the JSONL.

    ``token_times=True`` also rebuilds a file written without the token lists.
    """
    from workbench.storage.rundir import RECORDS, resolve_run_dir

    d = resolve_run_dir(run_dir)
    pq_file, js = d / PARQUET, d / RECORDS
    stale = not pq_file.exists() or (js.exists() and js.stat().st_mtime > pq_file.stat().st_mtime)
    if not stale and token_times:
        stale = "token_times_ns" not in parquet_columns(pq_file)
    if stale:
        convert(d, token_times=bool(token_times))
    return pq_file


def parquet_columns(path: str | Path) -> list[str]:
    require()
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)
