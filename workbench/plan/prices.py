"""Prices per GPU-hour for a plan's cost: a default table, overridden by ``--price``.

The table's source and date, and the ``--price`` grammar (``h100=2.5,h200=3.7``; a bare
number: every GPU): docs/plan.md, "Prices". A GPU the table does not list has no cost
until ``--price GPU=USD`` gives one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.errors import ConfigError
from workbench.sim.presets.catalog import ACCELERATORS

#: the key of the price every GPU without a price of its own takes
EVERY_GPU = "*"
#: on-demand USD per GPU-hour, Hyperstack's public rate card (docs/plan.md, "Prices")
DEFAULT_PRICES: dict[str, float] = {"h100": 3.20, "h200": 3.99, "b200": 6.00, "a100": 1.60}


def parse_prices(spec: str | float | Mapping[str, float] | None) -> dict[str, float]:
    """The price table a plan uses: the defaults, overridden by ``spec`` (module
    docstring); a bare number replaces the whole table. Raises ``ConfigError`` on an
    unknown GPU, a malformed item or a negative price."""
    if spec is None:
        return dict(DEFAULT_PRICES)
    items: list[tuple[str, Any]]
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
    elif isinstance(spec, int | float):
        items = [(EVERY_GPU, spec)]
    else:
        items = []
        for part in (p.strip() for p in str(spec).split(",")):
            if part:
                gpu, sep, value = part.partition("=")
                items.append((gpu.strip(), value) if sep else (EVERY_GPU, gpu))
    table = dict(DEFAULT_PRICES)
    if any(gpu == EVERY_GPU for gpu, _ in items):
        table = {}
    for gpu, value in items:
        gpu = gpu.lower()
        if gpu != EVERY_GPU and gpu not in ACCELERATORS:
            raise ConfigError(f"--price: unknown GPU {gpu!r}; known: "
                              f"{', '.join(sorted(ACCELERATORS))}")
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"--price: {value!r} is not a price in USD per GPU-hour "
                              "(write 2.5, or h100=2.5,h200=3.7)") from None
        if not price >= 0:
            raise ConfigError(f"--price: a price must be >= 0, got {price}")
        table[gpu] = price
    return table


def price_of(prices: Mapping[str, float], gpu: str | None) -> float | None:
    """``gpu``'s price per GPU-hour (None: a calibrated engine, whose GPU is unknown),
    else the every-GPU price, else None (no price: the cost is left out)."""
    if gpu is not None and gpu in prices:
        return prices[gpu]
    return prices.get(EVERY_GPU)
