"""The catalog of per-request metrics, one ``Metric`` row each, in ``to_frame``'s column
order (docs/metrics.md, "The catalog", is ``markdown_table``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "float", "list"]
#: a metric of the derived columns before it: name -> one array per column, one value a row
Compute = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Metric:
    """One per-request metric (a column ``derive`` returns, docs/metrics.md)."""

    name: str
    unit: str  # "ms", "tokens", "count", "ratio"
    label: str  # short human name: "TTFT"
    kind: Kind = "float"
    #: a column of ``to_frame`` (False: in ``records.parquet`` only, e.g. ``itl_count``)
    in_frame: bool = True
    #: ``summary.json`` holds its ``describe`` block over ok requests
    summarised: bool = False
    #: one of the latency metrics reports, sweeps and ``--percentiles`` print
    latency: bool = False
    #: an SLO bound may name it (``metrics.slo``)
    slo_able: bool = False
    #: the column a per-request SLO bound compares (default: ``name``); ``itl_ms`` is a
    #: list per request, so a request's own value is its largest gap
    request_value: str = ""
    #: the label of a plot's axis or title (default: ``label``)
    long_label: str = ""
    #: one-line definition (docs/metrics.md's table)
    doc: str = ""
    #: computed from the columns of earlier rows by ``derive`` (None: ``derive``'s own code)
    compute: Compute | None = None

    @property
    def per_request(self) -> str:
        return self.request_value or self.name

    @property
    def title(self) -> str:
        return self.long_label or self.label


_MS = "ms"


def _hit_delta(cols: Mapping[str, Any]) -> Any:
    return cols["actual_hit"] - cols["planned_hit"]


CATALOG: tuple[Metric, ...] = (
    Metric("output_tokens", "tokens", "output tokens", "int",
           doc="server completion_tokens, else the stream's positive token counts"),
    Metric("planned_prompt_tokens", "tokens", "planned prompt", "int",
           doc="planned prefix + input tokens (p + i)"),
    Metric("prompt_len", "tokens", "prompt", "int",
           doc="server prompt_tokens, else as sent, else as planned"),
    Metric("first_event_tokens", "tokens", "first event tokens", "int",
           doc="output tokens in the first token event"),
    Metric("token_events", "count", "token events", "int",
           doc="stream events carrying at least one output token id"),
    Metric("itl_count", "count", "ITL gaps", "int", in_frame=False,
           doc="gaps between token events"),
    Metric("ttft_ms", _MS, "TTFT", summarised=True, latency=True, slo_able=True,
           doc="dispatch → first token event"),
    Metric("tpot_ms", _MS, "TPOT", summarised=True, latency=True, slo_able=True,
           doc="(last − first token event) / (output tokens − first event's tokens)"),
    Metric("itl_ms", _MS, "ITL", "list", summarised=True, latency=True, slo_able=True,
           request_value="itl_max_ms", doc="gaps between consecutive token events (a list)"),
    Metric("terminal_tail_ms", _MS, "terminal tail", summarised=True, slo_able=True,
           doc="last token event → end of stream"),
    Metric("e2e_ms", _MS, "E2E", summarised=True, latency=True, slo_able=True,
           long_label="E2E latency", doc="dispatch → end of stream"),
    Metric("completion_amortized_tpot_ms", _MS, "amortized TPOT", summarised=True,
           slo_able=True, doc="(e2e − ttft) / (output tokens − 1), an audit figure"),
    Metric("actual_hit", "ratio", "hit actual",
           doc="cached / prompt_tokens when the server reported a cached count"),
    Metric("planned_hit", "ratio", "hit planned", doc="p / (p + i)"),
    Metric("hit_delta", "ratio", "hit delta", doc="actual_hit − planned_hit",
           compute=_hit_delta),
    Metric("arrival_release_lag_ms", _MS, "release lag", slo_able=True,
           doc="scheduled arrival → released"),
    Metric("admission_lag_ms", _MS, "admission lag", slo_able=True,
           doc="scheduled arrival → admitted (includes the release lag)"),
    Metric("itl_sum_ms", _MS, "ITL sum", in_frame=False,
           doc="last − first token event when there is a gap, else 0"),
    Metric("itl_min_ms", _MS, "ITL min", in_frame=False,
           doc="smallest gap"),
    Metric("itl_max_ms", _MS, "ITL max", in_frame=False,
           doc="largest gap"),
)  # fmt: skip


def names(catalog: tuple[Metric, ...] = CATALOG, **where: bool | str) -> tuple[str, ...]:
    """Names of the rows whose fields equal ``where`` (``names(slo_able=True)``), in order."""
    return tuple(m.name for m in catalog if all(getattr(m, k) == v for k, v in where.items()))


def get(name: str, catalog: tuple[Metric, ...] = CATALOG) -> Metric | None:
    """The row of ``name``, None when it is not a per-request metric."""
    return next((m for m in catalog if m.name == name), None)


def label(name: str, *, long: bool = False) -> str:
    """A metric's label (``long``: its plot title), the name itself when it has no row."""
    row = get(name)
    return name if row is None else row.title if long else row.label


def with_unit(name: str, stat: str = "") -> str:
    """``"TTFT (ms)"``: a metric's label and its unit, as a table's row or column names it;
    with a ``stat``, the statistic between them: ``"TTFT p90 (ms)"``."""
    row = get(name)
    if row is None:
        return f"{name} {stat}" if stat else name
    return f"{row.label} {stat} ({row.unit})" if stat else f"{row.label} ({row.unit})"


#: the columns ``to_frame`` derives, in frame order
FRAME_COLUMNS: tuple[str, ...] = names(in_frame=True)
#: the derived integer and float columns of ``derive`` (``records.parquet``)
INT_COLUMNS: tuple[str, ...] = names(kind="int")
FLOAT_COLUMNS: tuple[str, ...] = names(kind="float")
#: the latency metrics reports print (``summary.json`` describes them first)
LATENCY: tuple[str, ...] = names(latency=True)
#: ``summary.json``'s other described metrics (audit figures)
AUDIT: tuple[str, ...] = names(summarised=True, latency=False)
#: every metric an SLO bound may name
SLO_ABLE: tuple[str, ...] = names(slo_able=True)
#: the three latency metrics compared and plotted by default (ITL is a list per request)
SCALAR_LATENCY: tuple[str, ...] = tuple(m.name for m in CATALOG if m.latency and m.kind != "list")


def markdown_table(catalog: tuple[Metric, ...] = CATALOG) -> str:
    """The catalog as docs/metrics.md's table (a test keeps the page equal to it)."""
    yes = {True: "yes", False: ""}
    lines = ["| metric | unit | label | summary.json | latency | SLO | definition |",
             "|---|---|---|---|---|---|---|"]
    for m in catalog:
        where = "" if m.in_frame else " (Parquet only)"
        lines.append(f"| `{m.name}`{where} | {m.unit} | {m.label} | {yes[m.summarised]} | "
                     f"{yes[m.latency]} | {yes[m.slo_able]} | {m.doc} |")
    return "\n".join(lines) + "\n"
