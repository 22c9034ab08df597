"""Typed task options: what ``--task-opt NAME=VALUE`` may set, declared once as a frozen
dataclass whose fields carry their help (trl's ``GRPOConfig`` pattern).

A task declares its options as a subclass of :class:`TaskOptions`::

    @dataclass(frozen=True)
    class Gsm8kOptions(TaskOptions):
        max_new_tokens: int = option(512, "new tokens per answer")
        protocol: str = option("opencompass", "the prompt protocol", choices=PROTOCOLS)

    @task
    class Gsm8k(Task):
        Options = Gsm8kOptions

and reads them typed, ``self.config.max_new_tokens``. :func:`option` is shorthand for
``field(default=..., metadata={"help": ..., "choices": ...})``; a plain ``field`` with that
metadata is the same. A field's type is one of ``bool``, ``int``, ``float``, ``str``; its
default must be of that type (a ``float`` field's default is a float: ``3.0``, not ``3``,
since the value is serialised into the evaluation hash as written). ``choices`` (strings)
are checked when the options are parsed. Checks across fields, and values derived from
others, go in the subclass's ``__post_init__`` (frozen: set a derived value with
``object.__setattr__``); it raises :class:`~agent2rl.errors.UserError` for a bad value.

From the same declaration come the CLI's help (``agent2rl tasks TASK``) and the options
tables of the task pages in ``docs/tasks/`` (:mod:`agent2rl.tasks.docs`)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from agent2rl.errors import UserError

#: the types an option may have (what ``--task-opt NAME=VALUE`` strings are parsed into)
OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)
#: the strings a ``bool`` option accepts (case-insensitive)
TRUE_WORDS = ("1", "true", "yes")
FALSE_WORDS = ("0", "false", "no")


def option(default: Any, help: str, choices: Sequence[str] | None = None) -> Any:
    """A task option's field: its ``default``, its one-line ``help`` and, for a string
    option, the ``choices`` it accepts (None: any string)."""
    extra = {"choices": tuple(choices)} if choices is not None else {}
    return field(default=default, metadata={"help": help, **extra})


@dataclass(frozen=True)
class OptionSpec:
    """One declared option, as help and docs show it."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    def default_text(self) -> str:
        """The default as it is written on the command line (``true``, ``3.0``, ``' | '``)."""
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, str) and (
            self.default != self.default.strip() or not self.default
        ):
            return repr(self.default)
        return str(self.default)


@dataclass(frozen=True)
class TaskOptions:
    """Base of every task's options (itself: a task without options). Frozen: a task's
    options do not change after it is built. Subclasses are validated when a task class
    declares them (:meth:`check_declaration`)."""

    @classmethod
    @functools.cache
    def specs(cls) -> tuple[OptionSpec, ...]:
        """Every option, in declaration order (cached per class: annotations are strings
        under ``from __future__ import annotations``, resolved once, on first use)."""
        hints = typing.get_type_hints(cls)
        return tuple(
            OptionSpec(
                f.name,
                hints.get(f.name, type(f.default)),
                f.default,
                str(f.metadata.get("help", "")),
                tuple(f.metadata["choices"]) if f.metadata.get("choices") is not None else None,
            )
            for f in dataclasses.fields(cls)
        )

    @classmethod
    def check_declaration(cls, owner: str) -> None:
        """Raise TypeError (a programming error, at import) unless every field of ``cls``
        has help, a type in :data:`OPTION_TYPES`, a default of exactly that type, and a
        default among its ``choices``. ``owner`` names the task in the message."""
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"task {owner}: {cls.__name__} must be a @dataclass(frozen=True)")
        for spec in cls.specs():
            where = f"task {owner}: option {spec.name}"
            if spec.type not in OPTION_TYPES:
                raise TypeError(f"{where}: type {spec.type!r} is not one of bool, int, float, str")
            if type(spec.default) is not spec.type:
                raise TypeError(f"{where}: default {spec.default!r} is not a {spec.type.__name__}")
            if not spec.help:
                raise TypeError(f"{where} has no help (option(default, help=...))")
            if spec.choices is not None and spec.default not in spec.choices:
                raise TypeError(f"{where}: default {spec.default!r} is not among its choices")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Name -> default, in declaration order."""
        return {s.name: s.default for s in cls.specs()}

    @classmethod
    def parse(cls, task: str, given: Mapping[str, Any] | None = None) -> Self:
        """The options with ``given`` over the defaults. A value may be the declared type or
        a string (the command line's), parsed into it (``bool``: 1/0, true/false, yes/no; an
        ``int`` string must be a whole number; a ``float`` option also takes an int). Raises
        :class:`UserError` for a name the task does not have (listing its options, with a
        did-you-mean), a value that is not of the option's type, or a string outside the
        option's choices; the subclass's ``__post_init__`` may raise one for a combination."""
        specs = {s.name: s for s in cls.specs()}
        values: dict[str, Any] = {}
        for name, value in (given or {}).items():
            spec = specs.get(name)
            if spec is None:
                raise UserError(unknown_option_message(task, name, cls))
            values[name] = _convert(task, spec, value)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Name -> value in declaration order: what ``run.json``'s ``task_options`` records
        and the evaluation hash covers."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_defaults(cls, owner: str, defaults: Mapping[str, Any]) -> type[TaskOptions]:
        """An options class made from a plain ``name -> default`` dict (a task written for
        the untyped declaration), each option's help saying only its type."""
        return dataclasses.make_dataclass(
            f"{owner.title().replace('-', '')}Options",
            [
                (n, type(d), option(d, f"{type(d).__name__} (no help declared)"))
                for n, d in defaults.items()
            ],
            bases=(cls,),
            frozen=True,
        )


def unknown_option_message(task: str, name: str, options: type[TaskOptions]) -> str:
    """``task T has no option 'x': did you mean 'y'? its options are ...``."""
    specs = options.specs()
    close = difflib.get_close_matches(name, [s.name for s in specs], n=1, cutoff=0.6)
    hint = f" did you mean {close[0]!r}?" if close else ""
    known = ", ".join(f"{s.name} ({s.type.__name__}, default {s.default_text()})" for s in specs)
    return (
        f"task {task} has no option {name!r}:{hint} its options are {known or 'none'} "
        f"(`agent2rl tasks {task}` explains each)"
    )


def _convert(task: str, spec: OptionSpec, value: Any) -> Any:
    kind = spec.type
    bad = UserError(
        f"task {task}: task option {spec.name}={value!r} is not a valid {kind.__name__} "
        f"(default {spec.default_text()}; `agent2rl tasks {task}` explains each option)"
    )
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in TRUE_WORDS + FALSE_WORDS:
            return value.lower() in TRUE_WORDS
        raise bad
    if kind in (int, float):
        # an int option takes an int, a float option an int or a float (never a bool)
        numeric = (int, float) if kind is float else int
        if isinstance(value, str) or (isinstance(value, numeric) and not isinstance(value, bool)):
            try:
                return kind(value)
            except ValueError:
                raise bad from None
        raise bad
    if not isinstance(value, str):
        raise bad
    if spec.choices is not None and value not in spec.choices:
        raise UserError(
            f"task {task}: unknown {spec.name} {value!r}: --task-opt {spec.name}={value}: "
            f"use {', '.join(spec.choices)}"
        )
    return value
