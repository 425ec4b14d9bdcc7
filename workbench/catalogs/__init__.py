"""Catalogs: one table per kind of figure, read by everything that lists them.

``requests``: the per-request metrics (``derive`` computes them); ``runs``: the
run-level figures of ``summary.json`` and of a sweep point; ``series``: what each
engine exports on ``/metrics`` under which Prometheus name. Plain data, no numpy or
pandas: the CLI reads them at start-up (docs/interface.md, "Extending").
"""
