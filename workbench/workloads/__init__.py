"""Workloads built from more than one axis: trace statistics, ``tracegen``, synthetic sessions.

``workbench.traces`` only reads files into a ``Workload``; what combines a trace
with a context policy (axis 2) or an arrival pattern (axis 3) lives here, above
both: ``trace_stats`` (what a workload asks of a server), ``materialize``
(``tracegen``: a workload written as a canonical trace) and ``synthetic``
(sessions drawn from distributions).
"""
