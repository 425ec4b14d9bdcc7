"""The executor registry: ``executor.kind`` → the ``Executor`` that plays a run's plan.

Each executor module registers itself (``EXECUTORS.add(kind, make)``, ``make(cfg) ->
Executor``); ``dispatch.executor_for`` picks by the config's kind, and nothing else
dispatches on it. The kinds a config may name are ``workbench.config.EXECUTOR_KINDS``
(checked before anything runs); ``virtual`` is ``simulate``'s own (virtual time).
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.config import RunConfig
from workbench.registry import Registry
from workbench.replay.session import Executor

EXECUTORS: Registry[Callable[[RunConfig], Executor]] = Registry("executor")
