"""``workbench capture``: record your own agents' token shape through a loopback proxy.

``CaptureProxy`` (``workbench.capture.proxy``) relays requests to an upstream unchanged
and writes one file per root conversation in kv-cache-tester's captured format
(docs/capture.md): counts, timings and salted block hashes, never text or credentials.
The rooms: ``protocols`` (what the three APIs' requests and responses say),
``sessions`` (which conversation and agent a request belongs to), ``tokens`` (where a
prompt's token ids come from), ``blocks`` (ids → salted chained block hashes → local
ids), ``writer`` (the file format, written atomically), ``proxy`` (the relay).
"""

from workbench.capture.proxy import CaptureProxy, read_capture

__all__ = ["CaptureProxy", "read_capture"]
