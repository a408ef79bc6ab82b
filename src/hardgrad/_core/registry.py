"""A small name -> class registry: the single source for tests, CLI, docs and plots."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps registry names to classes (or other objects) of one kind.

    Args:
        kind: what the entries are, used in error messages ("surrogate", "estimator").
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._defaults: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that files its argument under ``name``."""

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"A {self.kind} named {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return add

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._entries)

    def get(self, name: str, argument: str | None = None) -> T:
        """The entry called ``name``; ``ValueError`` listing the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            label = f"`{argument}`" if argument else f"{self.kind} name"
            known = ", ".join(repr(n) for n in self._entries)
            raise ValueError(
                f"Unknown {self.kind} {name!r} for {label}; available: {known}"
            ) from None

    def default(self, name: str, argument: str | None = None) -> Any:
        """The instance a name stands for: the registered class called with no arguments,
        made once and cached (entries are immutable, so one instance serves every call)."""
        if name not in self._defaults:
            factory: Any = self.get(name, argument)
            self._defaults[name] = factory()
        return self._defaults[name]

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
