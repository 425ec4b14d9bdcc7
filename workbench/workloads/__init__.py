"""Workloads built from more than one axis, above ``workbench.traces`` (which only reads
files): ``trace_stats``, ``materialize`` (``tracegen``), ``synthetic`` and ``standard``.
"""
