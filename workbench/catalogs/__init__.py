"""Catalogs: one table per kind of figure (``requests``, ``runs``, ``series``), read by
everything that lists them. Plain data, no numpy or pandas: the CLI reads them at start-up.
"""
