"""Which runs: the compiled kernels (``workbench/kernels.c``) or their Python twins.

``native`` is the extension ``workbench._kernels``, or None where it was not built or
``WORKBENCH_COMPILED=0``; then each kernel's twin (the reference, equal values:
tests/test_kernels.py) runs. The kernels, their twins and their callers are listed
in docs/virtual-time.md, "Compiled kernels".
"""

from __future__ import annotations

import os
from types import ModuleType


def compiled_wanted() -> bool:
    """False with ``WORKBENCH_COMPILED=0``: no compiled module runs (here, ``sim.kvindex``,
    ``sim.decoders``), every twin does."""
    return os.environ.get("WORKBENCH_COMPILED", "1").strip() != "0"


native: ModuleType | None = None
if compiled_wanted():
    try:
        from workbench import _kernels as native  # type: ignore[no-redef]
    except ImportError:  # not built: the twins run
        native = None

__all__ = ["compiled_wanted", "native"]
