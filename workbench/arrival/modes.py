"""The arrival-mode registry: a mode (``ArrivalMode``) says all the replay asks of it, so
nothing dispatches on its name; a new mode is one ``@register_mode`` module (docs/arrival.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.records import Unit
from workbench.registry import Registry

#: ``release(units, rate)``: each unit's release offset in ms from run start (file order)
Release = Callable[[Sequence[Unit], float | None], list[float]]


@dataclass(frozen=True)
class ArrivalMode:
    name: str
    release: Release
    description: str = ""
    takes_rate: bool = False
    closed_loop: bool = False
    #: draws the units' starts from an arrival process (``arrival.processes``)
    process: bool = False
    #: the process's own parameters (gamma: ``burstiness``), allowed for this mode only
    params: tuple[str, ...] = ()


MODES: Registry[ArrivalMode] = Registry("arrival mode")


def register_mode(
    name: str,
    *,
    description: str = "",
    takes_rate: bool = False,
    closed_loop: bool = False,
    process: bool = False,
    params: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
) -> Callable[[Release], Release]:
    """Decorator for a release function ``release(units, rate) -> offsets_ms``."""

    def deco(release: Release) -> Release:
        mode = ArrivalMode(name, release, description, takes_rate, closed_loop, process, params)
        MODES.add(name, mode, *aliases)
        return release

    return deco


def modes_with(capability: str) -> str:
    """The names of the modes that have ``capability``, for messages: ``'a' or 'b'``."""
    names = [m for m in MODES.names() if getattr(MODES.get(m), capability)]
    return " or ".join(repr(m) for m in names) or "(none)"
