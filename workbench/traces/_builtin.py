"""Imports every built-in reader so it registers. Import order = sniffing order.

Most specific first: canonical (exact header), dynamo, abench, trajectory,
tracelab, mooncake, independent, session (the loosest CSV).
"""

# reader imports (one line each, keep the order above):
