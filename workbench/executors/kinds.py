"""The executor registry: ``executor.kind`` → the ``Executor`` that plays a run's plan
(each executor module registers itself; docs/executors.md)."""

from __future__ import annotations

from collections.abc import Callable

from workbench.config import RunConfig
from workbench.registry import Registry
from workbench.replay.session import Executor

EXECUTORS: Registry[Callable[[RunConfig], Executor]] = Registry("executor")
