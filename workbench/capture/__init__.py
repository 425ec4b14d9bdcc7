"""``workbench capture``: record your own agents' token shape through a loopback proxy.

``CaptureProxy`` (``proxy``) relays requests to an upstream unchanged and writes one file
per root conversation in kv-cache-tester's captured format: counts, timings and salted
block hashes, never text or credentials (docs/capture.md).
"""

from workbench.capture.proxy import CaptureProxy, read_capture

__all__ = ["CaptureProxy", "read_capture"]
