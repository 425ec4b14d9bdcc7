"""The compiled modules; everything else about the package is in pyproject.toml.

All are optional: where no C compiler is at hand their build fails without failing
the install, and the same loops run in Python and numpy (the same answers, slower).

- ``workbench.sim._kvcache``: the KV manager's inner loops (the hash index and the block
  moves, ``workbench/sim/kvcache.c``; their twins ``workbench/sim/kvcache.py``,
  ``kvindex.py``).
- ``workbench.sim._decoders``: the implicit decoders' events (their state by slot and
  their queues, ``workbench/sim/decoders.c``; its twin ``workbench/sim/decoders.py``).
- ``workbench._kernels``: block keys, decode span ends, hash-id tokens, record hashes
  (``workbench/kernels.c``; ``workbench/kernels.py`` says where their twins are). Built
  with ``-ffp-contract=off``: its step times must round exactly as Python's do.
- ``workbench._vt__mypyc`` and an extension beside each module of
  ``workbench/compiled_set.py``'s ``MODULES``: the virtual-time step loop (scheduler, KV
  manager, decoders, cost model, segments) compiled by mypyc from its annotated
  Python, one group; the build records each source's sha256 in
  ``workbench/_vt_manifest.json`` so a changed source runs the Python twin
  (docs/virtual-time.md, "Compiled step loop"). Needs ``mypy`` at build time
  (``[build-system] requires``, pinned: its mypyc makes the C).
"""

import json
import os
import runpy

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
# the compiled set's list, read without importing the package
SET = runpy.run_path(os.path.join(HERE, "workbench", "compiled_set.py"))
SOURCES: dict = {}  # module -> sha256 of the source mypyc compiled


def _mypyc_extensions() -> list:
    try:
        from mypyc.build import mypycify
    except ImportError:  # no mypy at build time: the set runs from source
        return []
    paths = [SET["source_path"](m, "workbench") for m in SET["MODULES"]]
    SOURCES.update(SET["manifest"](os.path.join(HERE, "workbench")))  # what is compiled
    exts = mypycify(paths, opt_level="3", group_name=SET["GROUP"])
    for ext in exts:
        ext.optional = True  # no compiler: the Python twin runs, as for the C kernels
    return exts


class BuildExt(build_ext):
    """Builds every extension, then records the compiled sources' digests (the manifest
    ``workbench.compiled_set.state`` checks at import) where the set was built."""

    def run(self) -> None:
        super().run()
        names = [*SET["MODULES"], SET["GROUP"] + "__mypyc"]
        built = [os.path.exists(self.get_ext_fullpath(n)) for n in names]
        package_dir = os.path.dirname(self.get_ext_fullpath(SET["GROUP"] + "__mypyc"))
        record = os.path.join(package_dir, SET["MANIFEST"])
        if SOURCES and all(built):
            with open(record, "w", encoding="utf-8") as f:
                json.dump(SOURCES, f, indent=1, sort_keys=True)
        elif os.path.exists(record):
            os.remove(record)


setup(cmdclass={"build_ext": BuildExt}, ext_modules=[
    Extension("workbench.sim._kvcache", ["workbench/sim/kvcache.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("workbench.sim._decoders", ["workbench/sim/decoders.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("workbench._kernels", ["workbench/kernels.c"], optional=True,
              extra_compile_args=["-O2", "-ffp-contract=off"], libraries=["m"]),
    *_mypyc_extensions(),
])
