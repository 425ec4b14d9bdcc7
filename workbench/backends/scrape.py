"""Server-side metrics: scrape ``GET {root}/metrics`` (Prometheus text) on an interval
(docs/measurement-rules.md, "Server-side evidence"). A failed scrape never stops a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

import workbench.catalogs.series as series
from workbench import redact
from workbench.backends.transport import normalize_base_url, with_query
from workbench.bodies import ANSWER_MAX, PAGE_MAX, BodyError, read_body
from workbench.bodies import session as bounded_session
from workbench.catalogs.series import LLAMACPP_WITH_CACHED
from workbench.clock import Clock, WallClock
from workbench.promseries import GPU_SERIES, SIMULATED_LABEL, averaged
from workbench.promseries import describe as series_label
from workbench.redact import basic_authorization, safe_url, strip_url_credentials

__all__ = ["MetricsScraper", "detect_block_size", "endpoint_url", "parse_metrics"]

logger = logging.getLogger(__name__)

CACHE_CONFIG = "vllm:cache_config_info"
#: llama-server's prompt counters (cached excluded) and cached: summed, ``LLAMACPP_WITH_CACHED``
LLAMACPP_PROMPT = series.LLAMACPP.name("prompt_tokens") or ""
LLAMACPP_CACHED = series.LLAMACPP.name("hits") or ""
SERIES = series.SCRAPED | {CACHE_CONFIG}


def _wanted_lines(text: str, patterns: Sequence[str] = ()) -> str:
    keep = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if (
            name in SERIES
            or name in GPU_SERIES
            or any(fnmatch.fnmatchcase(name, p) for p in patterns)
        ):
            keep.append(line)
    keep.append("")
    return "\n".join(keep)


class _Page:
    """Series of one or more scraped pages, combined over label sets and endpoints."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.cache_config: dict[str, str] | None = None
        self.simulated: set[str] = set()  # series some sample of which is labelled simulated

    def add(self, text: str, patterns: Sequence[str] = ()) -> set[str]:
        """Add one page's wanted samples; returns the names it had."""
        names: set[str] = set()
        # parsed whole first: a page the parser refuses (ValueError) adds nothing
        families = list(text_string_to_metric_families(_wanted_lines(text, patterns)))
        for family in families:
            for sample in family.samples:
                if sample.name == CACHE_CONFIG:
                    self.cache_config = dict(sample.labels)
                    continue
                names.add(sample.name)
                self.sums[sample.name] = self.sums.get(sample.name, 0.0) + float(sample.value)
                self.counts[sample.name] = self.counts.get(sample.name, 0) + 1
                if sample.labels.get(SIMULATED_LABEL) == "true":
                    self.simulated.add(sample.name)
        return names

    def values(self) -> dict[str, float]:
        out = dict(self.sums)
        for name in out:
            if name in series.AVERAGED or averaged(name):
                out[name] /= self.counts[name]
        if LLAMACPP_PROMPT in out and LLAMACPP_CACHED in out:
            out[LLAMACPP_WITH_CACHED] = out[LLAMACPP_PROMPT] + out[LLAMACPP_CACHED]
        return out


def parse_metrics(
    text: str, patterns: Sequence[str] = ()
) -> tuple[dict[str, float], dict[str, str] | None]:
    """Prometheus text → (kept series values, ``vllm:cache_config_info`` labels or None)."""
    page = _Page()
    page.add(text, patterns)
    return page.values(), page.cache_config


def endpoint_url(url: str) -> str:
    """A further endpoint's page URL: ``http://`` and ``/metrics`` added where missing."""
    if "://" not in url:
        url = f"http://{url.strip()}"
    parts = urlsplit(url)
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


#: URLs whose page was cut at ``PAGE_MAX`` (the warning is logged once per URL)
_CUT_WARNED: set[str] = set()


async def _fetch(
    session: aiohttp.ClientSession, url: str, timeout_s: float,
    headers: dict[str, str] | None = None,
) -> tuple[str, bool]:
    """One page, and whether it was cut at ``bodies.PAGE_MAX`` (docs/security.md)."""
    shown = strip_url_credentials(url)
    get = session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers)
    async with get as resp:
        if resp.status != 200:
            # redacted whole, then cut: the page was asked with the run's credentials, and
            # a server may echo them (a secret cut in two would not be recognised)
            body = redact.excerpt((await read_body(resp, ANSWER_MAX)).text().strip(), 200)
            raise RuntimeError(f"HTTP {resp.status} from {shown}: {body}")
        page = await read_body(resp, PAGE_MAX)
    if not page.cut:
        return page.text(), False
    if shown not in _CUT_WARNED:
        _CUT_WARNED.add(shown)
        logger.warning("metrics page of %s passed %d bytes: cut there, the series after the "
                       "cut are not read (docs/security.md)", shown, PAGE_MAX)
    return page.data[: page.data.rfind(b"\n") + 1].decode("utf-8", errors="replace"), True


class _Endpoint:
    """A further ``/metrics`` page: the URL fetched, the URL shown, and its failures."""

    def __init__(self, url: str) -> None:
        full = endpoint_url(url)
        self.url = strip_url_credentials(full)  # what is fetched (its query kept)
        self.shown = safe_url(full)  # what is stored and logged
        auth = basic_authorization(full)  # registers the password for redaction
        self.headers = {"Authorization": auth} if auth else None
        self.failures = 0


async def detect_block_size(
    base_url: str, *, session: aiohttp.ClientSession | None = None, timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> int | None:
    """The server's KV block size from ``vllm:cache_config_info``; None if unknown.
    ``headers``: the run's credentials (llama.cpp's ``--api-key`` guards ``/metrics``)."""
    url = with_query(f"{normalize_base_url(base_url)}/metrics", base_url)
    sent = dict(headers) if headers else None
    try:
        if session is None:
            async with bounded_session() as own:
                text, _ = await _fetch(own, url, timeout_s, sent)
        else:
            text, _ = await _fetch(session, url, timeout_s, sent)
        _, config = parse_metrics(text)
        if config is None or "block_size" not in config:
            return None
        return int(float(config["block_size"]))
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, BodyError) as exc:
        logger.warning("block size detection via %s failed: %s", url, exc)
        return None


class MetricsScraper:
    """Scrapes ``/metrics`` every ``interval_s`` into ``timeline`` rows while started."""

    def __init__(
        self,
        base_url: str,
        interval_s: float = 1.0,
        clock: Clock | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 5.0,
        extra_urls: Sequence[str] = (),
        patterns: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = with_query(f"{normalize_base_url(base_url)}/metrics", base_url)
        #: sent with the server's own page: the run's credentials (``detect_block_size``)
        self.headers = dict(headers) if headers else None
        self.endpoints = [_Endpoint(u) for u in extra_urls]
        self.patterns = tuple(patterns)
        #: series kept beyond the engine's own list: name → label, unit, endpoints, simulated
        self.series: dict[str, dict[str, Any]] = {}
        self.interval_ns = max(1, round(interval_s * 1e9))
        self.clock: Clock = clock if clock is not None else WallClock()
        self.timeout_s = timeout_s
        self.timeline: list[dict[str, Any]] = []
        self.cache_config: dict[str, str] | None = None
        self.failures = 0
        #: pages longer than ``bodies.PAGE_MAX`` (cut there): the manifest's ``pages_cut``
        self.cut: set[str] = set()
        self._session = session
        self._own_session = session is None
        self._task: asyncio.Task[None] | None = None

    async def scrape_once(self) -> dict[str, Any]:
        """One row from every endpoint (``error``, ``endpoint_errors`` for those that failed)."""
        t_ns = self.clock.now_ns()
        if self._session is None:
            self._session = bounded_session()
        session = self._session
        (own, own_error), *pages = await asyncio.gather(
            self._page(session, self.url, self.headers),
            *(self._page(session, e.url, e.headers) for e in self.endpoints),
        )
        page = _Page()
        row: dict[str, Any] = {"t_ns": t_ns}
        if own is not None:
            own_error = self._take(page, self.url, own)
        if own_error is not None:
            self.failures += 1
            level = logging.WARNING if self.failures == 1 else logging.DEBUG
            logger.log(level, "metrics scrape of %s failed: %s", self.url, own_error)
            row["error"] = own_error
        errors: dict[str, str] = {}
        for endpoint, (text, error) in zip(self.endpoints, pages, strict=True):
            if text is not None:
                error = self._take(page, endpoint.shown, text)
            if error is None:
                continue
            endpoint.failures += 1
            level = logging.WARNING if endpoint.failures == 1 else logging.DEBUG
            logger.log(level, "metrics scrape of %s failed: %s", endpoint.shown, error)
            errors[endpoint.shown] = str(error)
        row.update(page.values())
        if errors:
            row["endpoint_errors"] = errors
        if page.cache_config is not None:
            self.cache_config = page.cache_config
            row["cache_config"] = page.cache_config
        return row

    async def _page(
        self, session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
    ) -> tuple[str | None, str | None]:
        """(one page's text, None), or (None, ``"Type: message"`` of what it failed with)."""
        try:
            text, cut = await _fetch(session, url, self.timeout_s, headers)
            if cut:
                self.cut.add(strip_url_credentials(url))
            return text, None
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError,
                BodyError) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def _take(self, page: _Page, source: str, text: str) -> str | None:
        """Add a page's series to the row's; the parser's error, if it refused the page."""
        try:
            names = page.add(text, self.patterns)
        except ValueError as exc:
            return f"{type(exc).__name__}: {exc}"
        # remember where each series beyond the engine's own list came from
        for name in names - SERIES:
            info = self.series.setdefault(name, {**series_label(name), "endpoints": []})
            if source not in info["endpoints"]:
                info["endpoints"].append(source)
            info["simulated"] = name in page.simulated or info.get("simulated", False)
        return None

    def describe(self) -> dict[str, Any]:
        """The manifest's ``metrics_scrape``: endpoints, patterns and the further series kept."""
        return {
            "url": self.url,
            "endpoints": [e.shown for e in self.endpoints],
            "patterns": list(self.patterns),
            "series": {name: self.series[name] for name in sorted(self.series)},
            **({"pages_cut": sorted(safe_url(u) for u in self.cut)} if self.cut else {}),
        }

    async def start(self) -> None:
        """Take the baseline row now (before any request of the run), then scrape in a task."""
        if self._task is None:
            self._append(await self.scrape_once())
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the background task, take one last row (closes the window), release HTTP."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._append(await self.scrape_once())
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> MetricsScraper:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _append(self, row: dict[str, Any]) -> None:
        row.pop("cache_config", None)  # static; kept once in self.cache_config
        self.timeline.append(row)

    async def _run(self) -> None:
        next_ns = self.clock.now_ns()
        while True:
            next_ns += self.interval_ns
            now = self.clock.now_ns()
            if next_ns < now:  # a slow scrape: skip missed ticks rather than burst
                next_ns = now + self.interval_ns - (now - next_ns) % self.interval_ns
            await self.clock.sleep_until(next_ns)
            self._append(await self.scrape_once())
