"""The trace-format registry: ``TraceFormat``, ``FORMATS`` and ``register_format``.

Every reader module registers its format here when imported
(``@register_format(name, sniff=...)``); ``workbench.traces.load`` imports them all
(``_builtin``, in sniffing order) and looks formats up in ``FORMATS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.records import Workload
from workbench.registry import Registry

Reader = Callable[..., Workload]
Sniffer = Callable[[list[str]], bool]


@dataclass(frozen=True)
class TraceFormat:
    name: str
    read: Reader
    sniff: Sniffer
    description: str = ""
    folders: bool = False  # reads a folder of its files too (``load.detect_format``)


FORMATS: Registry[TraceFormat] = Registry("trace format")


def register_format(
    name: str, *, sniff: Sniffer, description: str = "", aliases: tuple[str, ...] = (),
    folders: bool = False,
) -> Callable[[Reader], Reader]:
    """Decorator for a reader function ``read(path: Path, **options) -> Workload``;
    ``folders``: it also takes a folder of its files (sniffed on the first by name)."""

    def deco(read: Reader) -> Reader:
        FORMATS.add(name, TraceFormat(name, read, sniff, description, folders), *aliases)
        return read

    return deco
