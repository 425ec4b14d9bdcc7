"""Which runs: the compiled kernels (``workbench/kernels.c``) or their Python twins.

``native`` is the extension module ``workbench._kernels``, or None where it was not
built (no C compiler at install time: setup.py builds it optionally). Each kernel has a
twin that stays the reference and runs when ``native`` is None; both give the same
values (tests/test_kernels.py compares them). ``WORKBENCH_COMPILED=0`` in the environment
makes the twins run everywhere (``compiled_wanted``).

====================  ======================================  ================================
kernel                twin                                    used by
====================  ======================================  ================================
``block_keys``        ``segments._mix`` / ``_mix_one``        ``segments.BlockKeyer.upto``
``block_keys_bytes``  the same, as int64 bytes                ``segments.BlockKeyer.extend``
``decode_ends``       ``sim.cost.decode_steps_ns`` + a sum    ``sim.engine.Engine._span_ends``
``heads``             ``context.tokens._head_grid`` + finish  ``TokenPool.heads_array``
====================  ======================================  ================================

docs/virtual-time.md, "Compiled kernels", has what they save.
"""

from __future__ import annotations

import os
from types import ModuleType


def compiled_wanted() -> bool:
    """False when the environment has ``WORKBENCH_COMPILED=0``: then no compiled module
    is used, here, in the KV manager (``sim.kvindex``) or for the implicit decoders'
    events (``sim.decoders``), and every twin runs (to tell whether a difference comes
    from compiled code)."""
    return os.environ.get("WORKBENCH_COMPILED", "1").strip() != "0"


native: ModuleType | None = None
if compiled_wanted():
    try:
        from workbench import _kernels as native  # type: ignore[no-redef]
    except ImportError:  # not built: the twins run
        native = None

__all__ = ["compiled_wanted", "native"]
