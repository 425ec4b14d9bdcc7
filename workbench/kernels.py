"""Which runs: the compiled kernels (``workbench/kernels.c``) or their Python twins.

``native`` is the extension ``workbench._kernels``, or None where it was not built or
``WORKBENCH_COMPILED=0``; then each kernel's twin (the reference, equal values:
tests/test_kernels.py) runs. The kernels, their twins and their callers are listed
in docs/virtual-time.md, "Compiled kernels".

``compiled()`` says whether the step loop's modules compiled by mypyc run (the set in
``workbench.compiled_set``; docs/virtual-time.md, "Compiled step loop (mypyc)"): the same
switch, ``WORKBENCH_COMPILED=0``, runs their sources, all of them.
"""

from __future__ import annotations

from types import ModuleType

from workbench.compiled_set import compiled, compiled_wanted

native: ModuleType | None = None
if compiled_wanted():
    try:
        from workbench import _kernels as native  # type: ignore[no-redef]
    except ImportError:  # not built: the twins run
        native = None

__all__ = ["compiled", "compiled_wanted", "native"]
