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
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("workbench.sim._kvcache", ["workbench/sim/kvcache.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("workbench.sim._decoders", ["workbench/sim/decoders.c"], optional=True,
              extra_compile_args=["-O2"]),
    Extension("workbench._kernels", ["workbench/kernels.c"], optional=True,
              extra_compile_args=["-O2", "-ffp-contract=off"], libraries=["m"]),
])
