"""Parity campaigns: qualify a change to the simulated engine (docs/parity.md).

A frozen ``spec`` runs on two ``sides`` twice each (``runner``, ``child.py``); ``diff``
finds where digests differ, ``evidence`` checks each row's pressure, and ``capacity``
proposes the capacity change that brings a row's preemptions into range.
"""

from __future__ import annotations

from workbench.qualify.capacity import apply_capacity, propose_capacity
from workbench.qualify.evidence import evidence
from workbench.qualify.runner import EXAMPLE_SPEC, UNSTABLE, load_result, parity
from workbench.qualify.spec import ParitySpec, load_spec, parse_spec, read_spec

__all__ = ["EXAMPLE_SPEC", "UNSTABLE", "ParitySpec", "apply_capacity", "evidence",
           "load_result", "load_spec", "parity", "parse_spec", "propose_capacity", "read_spec"]
