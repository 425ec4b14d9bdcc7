"""The trace-format registry: ``TraceFormat``, ``FORMATS`` and ``register_format``; each
reader module registers itself when imported (``_builtin``, in sniffing order).
"""

from __future__ import annotations

import inspect
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
    folders: tuple[str, ...] = ()  # reads a folder of files with these suffixes too
    #: the options the reader takes (its keyword-only parameters), checked by ``load_trace``
    options: tuple[str, ...] = ()
    #: it reads a window of units itself (a ``window`` parameter), from a file it does not
    #: hold: ``load_trace(path, window=(offset, count))`` (docs/trace-bounds.md)
    windows: bool = False


FORMATS: Registry[TraceFormat] = Registry("trace format")


def register_format(
    name: str, *, sniff: Sniffer, description: str = "", aliases: tuple[str, ...] = (),
    folders: tuple[str, ...] = (),
) -> Callable[[Reader], Reader]:
    """Decorator for a reader function ``read(path: Path, *, option=default ...) -> Workload``
    (``read(path, window=None, *, ...)``: it reads a window itself); ``folders``: it also
    takes a folder of its files, those with these suffixes (sniffed on the first of them
    by name)."""

    def deco(read: Reader) -> Reader:
        params = inspect.signature(read).parameters
        options = tuple(p.name for p in params.values() if p.kind is p.KEYWORD_ONLY)
        windows = "window" in params and params["window"].kind is not params["window"].KEYWORD_ONLY
        FORMATS.add(name, TraceFormat(name, read, sniff, description, folders, options,
                                      windows), *aliases)
        return read

    return deco
