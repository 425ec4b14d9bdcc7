"""Parity campaigns: qualify a change to the simulated engine (docs/parity.md).

A frozen spec (``spec``) runs on a baseline and a candidate — two git revisions of
this project (``sides``) or two engine configurations — twice each in processes of
their own (``runner``, ``child.py``); each side's canonical digest, whether they agree
and where they first differ (``diff``), the pressure evidence of every row
(``evidence``), and the smallest capacity change that brings a row's preemptions into
range (``capacity``).
"""

from __future__ import annotations

from workbench.qualify.capacity import apply_capacity, propose_capacity
from workbench.qualify.evidence import evidence
from workbench.qualify.runner import EXAMPLE_SPEC, UNSTABLE, load_result, parity
from workbench.qualify.spec import ParitySpec, load_spec, parse_spec, read_spec

__all__ = ["EXAMPLE_SPEC", "UNSTABLE", "ParitySpec", "apply_capacity", "evidence",
           "load_result", "load_spec", "parity", "parse_spec", "propose_capacity", "read_spec"]
