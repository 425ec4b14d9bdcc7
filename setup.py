"""The one compiled module; everything else about the package is in pyproject.toml.

``workbench.sim._kvcache`` is the KV manager's inner loops in C (the hash index and
the block moves, ``workbench/sim/kvcache.c``). It is optional: where no C compiler is
at hand the build of it fails without failing the install, and the manager
(``workbench/sim/kvcache.py``, ``kvindex.py``) runs the same loops in numpy and a
dict (the same answers, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("workbench.sim._kvcache", ["workbench/sim/kvcache.c"],
                             optional=True, extra_compile_args=["-O2"])])
