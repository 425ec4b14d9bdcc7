"""Imports every built-in reader so it registers. Import order = sniffing order: most
specific first (bailian before mooncake: it has chat_id; session_csv, the loosest, last).
"""

# ruff: noqa: I001  (import order is sniffing order, not alphabetical)
# reader imports (one line each, keep the order above):
from workbench.traces import canonical  # noqa: F401
from workbench.traces import dynamo  # noqa: F401
from workbench.traces import aiperf_custom  # noqa: F401
from workbench.traces import abench  # noqa: F401
from workbench.traces import trajectory  # noqa: F401
from workbench.traces import sharegpt  # noqa: F401
from workbench.traces import weka  # noqa: F401
from workbench.traces import tracelab  # noqa: F401
from workbench.traces import bailian  # noqa: F401
from workbench.traces import mooncake  # noqa: F401
from workbench.traces import azure  # noqa: F401
from workbench.traces import burstgpt  # noqa: F401
from workbench.traces import independent  # noqa: F401
from workbench.traces import session_csv  # noqa: F401
