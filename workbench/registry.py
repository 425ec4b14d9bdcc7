"""One small registry type shared by the axes: a new trace format, context policy,
arrival mode or backend is one module with one ``@REGISTRY.register("name")`` line."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from workbench.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → object, with aliases. ``get`` errors list the valid names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        _ALL.add(self)

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj, *aliases)
            return obj

        return deco

    def add(self, name: str, obj: T, *aliases: str) -> None:
        if name in self._items or name in self._aliases:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = obj
        for alias in aliases:
            self._aliases[alias] = name

    def remove(self, name: str) -> T:
        """Unregister ``name`` and its aliases; returns what was registered."""
        obj = self._items.pop(name)
        self._aliases = {a: n for a, n in self._aliases.items() if n != name}
        return obj

    @contextmanager
    def added(self, name: str, obj: T, *aliases: str) -> Iterator[T]:
        """``add`` for the duration of a ``with`` block (a test's own axis value)."""
        self.add(name, obj, *aliases)
        try:
            yield obj
        finally:
            self.remove(name)

    def canonical(self, name: str, field: str | None = None) -> str:
        """The registered name for ``name`` or one of its aliases; ``field``: the config
        field that gave ``name``, for the error (``ConfigError.field``)."""
        if name in self._items:
            return name
        if name in self._aliases:
            return self._aliases[name]
        valid = ", ".join(self.names())
        raise ConfigError(f"unknown {self.kind} {name!r}; valid: {valid}", field=field)

    def get(self, name: str, field: str | None = None) -> T:
        return self._items[self.canonical(name, field)]

    def names(self) -> list[str]:
        return list(self._items)

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._aliases


_ALL: weakref.WeakSet[Registry[Any]] = weakref.WeakSet()


def registered_in_main() -> list[str]:
    """``"kind name"`` of every registered object defined in ``__main__`` (``spawning``)."""
    return sorted(f"{r.kind} {name}" for r in list(_ALL) for name, obj in r._items.items()
                  if getattr(obj, "__module__", None) == "__main__")  # fmt: skip
