"""One generic name -> object registry per kind of plug-in (tasks, log parsers, metering
providers, inference backends, DeepSearchQA's search backends).

A registry is filled two ways: the package's own modules call :meth:`Registry.register`
(or a decorator built on it) when imported, and installed distributions add entries through
the entry-point group ``agent2rl.<kind>`` (``[project.entry-points."agent2rl.tasks"]`` in their
``pyproject.toml``). The group is loaded lazily, on the first lookup, so that importing a
registry never imports third-party code.

A name is registered once: registering another object under a taken name raises
:class:`RegistryConflict` naming both, instead of silently replacing the first (as
lm-evaluation-harness asserts). Registering the same object again is a no-op, so a module
imported twice (or an entry point pointing at an already registered class) is harmless.

An unknown name is a :class:`UnknownName` (a :class:`~agent2rl.errors.UserError` and a
``KeyError``) listing the known names, with a did-you-mean when the name looks like a typo.
A registry is a read-only :class:`~collections.abc.Mapping`, so code that read a plain dict
(``PROVIDERS.items()``, ``PARSERS.get(fmt, fallback)``) reads it unchanged.
"""

from __future__ import annotations

import difflib
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, TypeVar

from agent2rl.errors import UserError

T = TypeVar("T")

#: the entry-point group prefix: kind ``tasks`` is group ``agent2rl.tasks``
ENTRY_POINT_PREFIX = "agent2rl."


class RegistryConflict(UserError):
    """Two different objects were registered under one name: whoever registered the second
    (a module here, or an installed plug-in) must rename it. A :class:`UserError`, so the CLI
    prints the one line naming both instead of a traceback."""


class UnknownName(UserError, KeyError):
    """A lookup of a name nobody registered: a :class:`UserError` (the CLI prints its one line)
    and a :class:`KeyError` (so code written against a plain dict still catches it)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class Registry(Mapping[str, T]):
    """Named objects of one kind (``tasks``, ``log_parsers``...), a read-only mapping.

    ``kind`` names the registry and gives its entry-point group, ``agent2rl.<kind>``;
    ``what`` is how an error names one entry (``task``, ``log format``). An entry point's
    object is passed through ``coerce`` (e.g. a class to its instance) and registered under
    the entry point's name, unless it is a module or an object that registered itself while
    loading. A broken entry point raises :class:`UserError` naming the distribution, on the
    first lookup. Iteration is in registration order (like a dict); :meth:`names` is sorted.
    Thread-safe: registration and the one-time entry-point load hold a lock.
    """

    def __init__(
        self, kind: str, what: str | None = None, coerce: Callable[[Any], T] | None = None
    ) -> None:
        self.kind = kind
        self.what = what or kind.rstrip("s").replace("_", " ")
        self._coerce = coerce
        self._items: dict[str, T] = {}
        self._lock = threading.RLock()
        self._entry_points_loaded = False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._items)})"

    @property
    def group(self) -> str:
        """The entry-point group that extends this registry."""
        return ENTRY_POINT_PREFIX + self.kind

    def register(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` and return it (a taken name: the module docstring).
        An empty name is refused."""
        if not name or not isinstance(name, str):
            raise RegistryConflict(f"{self.what} registry {self.kind!r}: a name must be a string")
        with self._lock:
            have = self._items.get(name)
            if have is not None and have is not obj:
                raise RegistryConflict(
                    f"{self.what} {name!r} is already registered ({_describe(have)}); "
                    f"refusing to replace it with {_describe(obj)}: give the new one "
                    f"another name"
                )
            self._items[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (absent: nothing happens). For tests and deliberate overrides."""
        with self._lock:
            self._items.pop(name, None)

    def lookup(self, name: str) -> T:
        """``registry[name]``: :class:`UnknownName` (``unknown <what> 'x': did you mean 'y'?
        choose one of a, b``) when there is none."""
        return self[name]

    def __getitem__(self, name: str) -> T:
        self._load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.unknown_message(name)) from None

    # ``get`` and ``in`` answer a miss without building :meth:`unknown_message` (its
    # did-you-mean search), which Mapping's versions would do through ``__getitem__``.
    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        """The object registered as ``name``, else ``default`` (a dict's ``get``)."""
        self._load_entry_points()
        return self._items.get(name, default)

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._items

    def unknown_message(self, name: str) -> str:
        """The one-line error for an unknown ``name`` (for callers that word their own
        error around it). The suggestion appears only when a close name exists."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
        hint = f" did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        listed = ", ".join(known) if known else "(none registered)"
        return f"unknown {self.what} {name!r}:{hint} choose one of {listed}"

    def names(self) -> list[str]:
        """Every registered name, sorted (entry points included)."""
        self._load_entry_points()
        with self._lock:
            return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        # Registration order, as a dict iterates (entry points after the package's own):
        # a caller that tries entries in turn (the proxy matching routes) keeps its order.
        self._load_entry_points()
        with self._lock:
            return iter(list(self._items))

    def __len__(self) -> int:
        self._load_entry_points()
        return len(self._items)

    def reload_entry_points(self) -> None:
        """Load the entry-point group again (after installing a distribution at run time;
        what was registered before stays)."""
        with self._lock:
            self._entry_points_loaded = False
        self._load_entry_points()

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        with self._lock:
            if self._entry_points_loaded:
                return
            # Set first: an entry point's module may itself look the registry up while it
            # is imported (a task module calling get_task), which must not recurse.
            self._entry_points_loaded = True
            for ep in entry_points(group=self.group):
                try:
                    obj = ep.load()
                    if self._coerce is not None:
                        obj = self._coerce(obj)
                except Exception as err:  # a broken plug-in: say which, not a traceback
                    dist = ep.dist.name if ep.dist else "an installed distribution"
                    raise UserError(
                        f"entry point {ep.name!r} ({ep.value}) of {dist} in group "
                        f"{self.group!r} failed to load: {type(err).__name__}: {err}; "
                        f"fix or uninstall that distribution"
                    ) from err
                # A module whose import registered its objects (decorators) is not itself
                # an entry, nor is an object that registered itself while loading.
                if isinstance(obj, types.ModuleType) or any(v is obj for v in self._items.values()):
                    continue
                self.register(ep.name, obj)


def _describe(obj: object) -> str:
    """``module.qualname`` of a class or function, else its type."""
    module = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    if module and qual:
        return f"{module}.{qual}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__} object"
