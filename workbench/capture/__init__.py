"""``workbench capture``: record your own agents' token shape through a loopback proxy
(``CaptureProxy``; docs/capture.md).
"""

from workbench.capture.proxy import CaptureProxy, read_capture

__all__ = ["CaptureProxy", "read_capture"]
