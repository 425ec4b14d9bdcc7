"""The one compiled module; everything else about the package is in pyproject.toml.

``workbench.sim._kvindex`` is the KV manager's hash index in C
(``workbench/sim/kvindex.c``). It is optional: where no C compiler is at hand the
build of it fails without failing the install, and ``workbench/sim/kvindex.py``
serves the same index as a dict (slower, same answers).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("workbench.sim._kvindex", ["workbench/sim/kvindex.c"],
                             optional=True, extra_compile_args=["-O2"])])
