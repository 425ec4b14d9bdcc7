"""The replay report's sections by name, over one run: ``RunReport(source).table("errors")``.

One place decides what each section shows, so the headless report, the notebook and the
panel's live view (``workbench.ui.live``) agree; summaries are computed once per report."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import pandas as pd

from workbench.metrics import run_rows, scan
from workbench.records import RunManifest
from workbench.report import plots, tables
from workbench.report.headline import Headline, engine_note, run_headline
from workbench.storage.rundir import read_manifest, run_damage

TABLE_NAMES = (
    "headline", "run", "config", "client", "latency", "prefix", "server", "workers", "by_round",
    "by_band", "agents", "errors",
)  # fmt: skip


class RunReport:
    """Tables (``table(name)``) and figures (``plot(kind)``) of one run's report."""

    def __init__(self, source: Any) -> None:
        self.source = source

    @cached_property
    def summary(self) -> dict[str, Any]:
        return scan.report_summary(self.source)

    @cached_property
    def manifest(self) -> RunManifest:
        manifest = None if isinstance(self.source, pd.DataFrame) else getattr(
            self.source, "manifest", None)
        if isinstance(manifest, RunManifest):
            return manifest
        run_dir = getattr(self.source, "attrs", {}).get("run_dir")  # a scanned run's frame
        if run_dir:
            return read_manifest(run_dir)
        return RunManifest.from_dict({})

    @property
    def run_id(self) -> str:
        # a scanned run is a DataFrame: its run_id column is not the run's id attribute
        src = self.source
        own = None if isinstance(src, pd.DataFrame) else getattr(src, "run_id", None)
        return str(own or self.manifest.run_id)

    @property
    def _times(self) -> str:
        """``"; simulated engine, 20× real time"`` (``engine_note``); empty for a server."""
        note = engine_note(self.manifest)
        return f"; {note}" if note else ""

    @property
    def _mode(self) -> str:
        """``" — non-streaming: TTFT = end-to-end latency; ..."`` (empty when streamed)."""
        mode = self.summary.get("response_mode")
        return f" — {mode['note']}" if isinstance(mode, dict) and mode.get("note") else ""

    # -- tables --------------------------------------------------------------------------
    def headline(self) -> Any:
        """The run's headline (``workbench.report.headline``) and, on a line of their
        own, the warnings a reader must not miss (an incomplete run, a warm cache)."""
        status = self.summary.get("run_status")
        warm = (self.summary.get("warm_cache") or {}).get("warning")
        return Headline([run_headline(self.summary, self.manifest),
                         *(f"DAMAGED: {note}" for note in self.damage),
                         tables.run_end_note(self.manifest, status) or "",
                         f"WARNING: {warm}" if warm else ""])

    @cached_property
    def damage(self) -> list[str]:
        """What of the stored run's files was damaged (``rundir.run_damage``); none for a
        run that was not read from a directory."""
        src = self.source
        run_dir = (src.attrs.get("run_dir") if isinstance(src, pd.DataFrame)
                   else getattr(src, "run_dir", None))
        return run_damage(run_dir) if run_dir else []

    def table(self, name: str) -> Any:
        """The section ``name`` (one of ``TABLE_NAMES``) as a displayable table (the
        ``headline`` section is a ``Headline``)."""
        builders: dict[str, Callable[[], Any]] = {
            "headline": self.headline,
            "run": lambda: tables.show(tables.run_table(self.summary, self.manifest),
                                       caption=f"Run {self.run_id}"),
            "config": lambda: tables.show(
                tables.config_table(self.manifest),
                caption="What was run: the four axes as resolved, the target, the trace"),
            "client": lambda: tables.show(
                tables.client_table(self.summary),
                caption=tables.client_caption(self.summary, self.manifest)),
            "latency": lambda: tables.show(tables.summary_table(self.summary),
                                           caption=tables.latency_caption(
                                               self.summary, "Latency of ok requests "
                                               f"(ms{self._times}){self._mode}")),
            "prefix": lambda: tables.show(tables.prefix_table(self.summary),
                                          caption=tables.prefix_caption(self.summary)),
            "server": lambda: tables.show(tables.server_table(self.summary),
                                          caption=tables.server_caption(self.summary)),
            "workers": lambda: tables.show(
                tables.worker_table(self.summary),
                caption="Per worker of a simulated cluster (hit rate 0-1, TTFT ms)"
                if self.summary.get("workers")
                else "One engine served every request (not a simulated cluster)"),
            "by_round": lambda: tables.show(
                tables.round_table(scan.report_by_round(self.source)),
                caption=f"By round index (ms{self._times}; hit rates 0-1)"),
            "agents": lambda: tables.show(tables.agent_table(self.summary),
                                          caption=tables.agent_caption(self.summary)),
            "by_band": lambda: tables.show(
                tables.band_table(scan.report_by_band(self.source)),
                caption=f"By prompt-length band (ms{self._times}; hit rates 0-1)"),
            "errors": self._errors,
        }
        if name not in builders:
            raise ValueError(f"unknown report table {name!r}; valid: {', '.join(TABLE_NAMES)}")
        return builders[name]()

    def _errors(self) -> tables.Table:
        table = tables.error_table(run_rows(self.source))
        requests = int(self.summary.get("requests") or 0)
        return tables.show(table, caption=tables.error_caption(table, requests))

    # -- figures -------------------------------------------------------------------------
    def plot(self, kind: str, **options: Any) -> Any:
        return plots.plot(self.source, kind, **options)
