"""Plain data across a process boundary: a tagged JSON encoding of Python's builtin values.

The two-process test runner (:mod:`agent2rl.sandbox.two_process`) sends each call's arguments
to the candidate's process, and each answer back, as one line of this encoding. The receiver
gets freshly built builtin objects and nothing else: no class, method or reference of the
sender's can come through, so a sender controls only *which* plain values arrive.

JSON's own values carry ``None``, ``bool``, ``str``, ``list``, ints within 64 bits and finite
floats (written as their ``repr``, which reads back exactly). Every other value is a JSON
object with one key naming its type::

    {"tuple": [...]}   {"set": [...]}   {"frozenset": [...]}   {"dict": [[key, value], ...]}
    {"int": "-0x1f..."}         an int beyond 64 bits, in hex (exact, linear time, and not
                                subject to Python's 4300-digit cap on decimal conversion)
    {"float": "nan"}            also "inf" and "-inf"
    {"complex": [re, im]}       re and im encoded as floats
    {"bytes": "00ff"}           also {"bytearray": "00ff"}

A dict keeps its insertion order, and its keys may be any of these values that are hashable.
A JSON object is only ever a tag, so ``{"tuple": [1]}`` (a tuple) and ``{"dict": [["tuple",
[1]]]}`` (a dict) cannot be confused.

:func:`encode` takes the exact builtin types above. An instance of a *subclass* of one
(``numpy.float64``, ``collections.Counter``, a namedtuple, an ``IntEnum``) is sent as the
builtin value it holds, read through the base type's own slots (``int.__int__``,
``dict.items``, ...), never through a method the subclass may override: an ``int`` subclass
whose ``__eq__`` always says yes arrives as the plain int it holds. The receiver's ``==``
is then the builtin one, as it would be for an honest answer of that value. Anything else (a
generator, a numpy array, an object of the program's own class) raises :class:`WireError`.
Values nested deeper than :data:`MAX_DEPTH` or a self-containing list raise it too.

:func:`decode` accepts this form only: JSON's ``NaN``/``Infinity`` literals, unknown tags,
objects with several keys, malformed tag bodies and unhashable set members or dict keys all
raise :class:`WireError`, as does nesting deeper than the interpreter's recursion limit. The
encoded text is ASCII without a newline, so one value is one line.

This file also runs inside the sandboxes (the bootstraps are this source followed by
:mod:`agent2rl.sandbox.split_boot`'s), so it imports only the standard library and no
``__future__`` features.
"""

# CPython's C scanner and string quoter, used directly: importing ``json`` would import ``re``
# too, ~6 ms at every sandbox start, twice per graded item.
from _json import encode_basestring_ascii as _quote
from _json import make_scanner as _make_scanner

#: how deeply containers may nest (HumanEval's values nest two or three levels)
MAX_DEPTH = 100

_INT_LIMIT = 1 << 63
_INF = float("inf")
_NON_FINITE = ("nan", "inf", "-inf")


class WireError(ValueError):
    """A value that has no plain-data form, or text that is not this encoding."""


def encode(value: object) -> str:
    """``value`` as one line of ASCII (see the module docstring for what is accepted).

    Raises :class:`WireError` naming the first value that cannot be sent.
    """
    out: list[str] = []
    try:
        _dump(value, 0, out)
    except RecursionError:  # a self-referencing structure below MAX_DEPTH's reach
        raise WireError("the value is nested too deeply") from None
    return "".join(out)


def decode(text: str | bytes) -> object:
    """The value encoded in ``text`` (surrounding whitespace, e.g. a newline, is ignored).

    Raises :class:`WireError` for anything :func:`encode` would not have written.
    """
    try:
        if type(text) is not str:
            text = bytes(text).decode("ascii")
        text = text.strip()
        tree, end = _scan(text, 0)
        if end != len(text):
            raise WireError("more than one value on the line")
        return _value(tree)
    except WireError:
        raise
    except StopIteration:  # the scanner's way of saying that no JSON value starts here
        raise WireError("not JSON") from None
    except Exception as err:
        # The scanner says ValueError or even SystemError for other malformed text; _value a
        # TypeError for an unhashable key, RecursionError for deep nesting.
        raise WireError(f"not a plain value: {type(err).__name__}: {err}"[:300]) from None


def _dump(x: object, depth: int, out: list[str]) -> None:
    """Append the tagged JSON text of ``x`` to ``out``."""
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(x)
    if t is str:
        out.append(_quote(x))
    elif x is None:
        out.append("null")
    elif t is bool:
        out.append("true" if x else "false")
    elif t is int:
        out.append(int.__repr__(x) if -_INT_LIMIT < x < _INT_LIMIT else f'{{"int":"{x:#x}"}}')
    elif t is float:
        # repr reads back exactly and always has a "." or an "e", so it decodes as a float.
        out.append(float.__repr__(x) if -_INF < x < _INF else f'{{"float":"{x!r}"}}')
    elif t is list:
        _items("[", x, depth, out, "]")
    elif t is tuple or t is set or t is frozenset:
        _items(f'{{"{t.__name__}":[', x, depth, out, "]}")
    elif t is dict:
        out.append('{"dict":[')
        for i, (k, v) in enumerate(x.items()):
            out.append(",[" if i else "[")
            _dump(k, depth + 1, out)
            out.append(",")
            _dump(v, depth + 1, out)
            out.append("]")
        out.append("]}")
    elif t is bytes or t is bytearray:
        out.append(f'{{"{t.__name__}":"{x.hex()}"}}')
    elif t is complex:
        _items('{"complex":[', (x.real, x.imag), depth, out, "]}")
    else:
        _dump(_builtin_value(x, t), depth, out)


def _items(start: str, items: object, depth: int, out: list[str], end: str) -> None:
    out.append(start)
    for i, v in enumerate(items):  # type: ignore[arg-type]
        if i:
            out.append(",")
        _dump(v, depth + 1, out)
    out.append(end)


def _builtin_value(x: object, t: type) -> object:
    """The builtin value an instance of a builtin type's subclass holds, else WireError."""
    for base, plain in _BASES:
        if issubclass(t, base):  # type(x), not isinstance: a faked __class__ does not count
            try:
                return plain(x)
            except Exception as err:  # a broken subclass: say so rather than crash
                raise WireError(f"cannot read the {base.__name__} in a {_name(t)}") from err
    raise WireError(f"a value of type {_name(t)} is not plain data")


# A subclass instance is read as its base type's value through the base type's own slots.
# bool cannot be subclassed, so an int subclass is never taken for one.
_BASES = (
    (int, int.__int__),
    (float, float.__float__),
    (complex, complex.__complex__),
    (str, str.__str__),
    (bytes, bytes.__bytes__),
    (bytearray, bytearray.copy),
    (list, lambda x: list(list.__iter__(x))),
    (tuple, lambda x: tuple(tuple.__iter__(x))),
    (dict, lambda x: dict(dict.items(x))),
    (set, lambda x: set(set.__iter__(x))),
    (frozenset, lambda x: frozenset(frozenset.__iter__(x))),
)


def _value(raw: object) -> object:
    """The value a JSON tree stands for (the inverse of :func:`_tree`)."""
    t = type(raw)
    if raw is None or t is bool or t is int or t is float or t is str:
        return raw
    if t is list:
        return [_value(v) for v in raw]
    if t is dict and len(raw) == 1:
        ((tag, body),) = raw.items()
        if tag in _COLLECTIONS and type(body) is list:
            return _COLLECTIONS[tag](_value(v) for v in body)
        if tag == "dict" and type(body) is list:
            return {_value(k): _value(v) for k, v in (_pair(p) for p in body)}
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag == "float" and body in _NON_FINITE:
            return float(body)
        if tag in ("bytes", "bytearray") and type(body) is str:
            data = bytes.fromhex(body)
            return data if tag == "bytes" else bytearray(data)
        if tag == "complex" and type(body) is list and len(body) == 2:
            re, im = (_value(v) for v in body)
            if type(re) is float and type(im) is float:
                return complex(re, im)
    what = f"an object with keys {sorted(map(str, raw))[:3]}" if t is dict else f"a {t.__name__}"
    raise WireError(f"not a plain value: {what}")


_COLLECTIONS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def _pair(raw: object) -> list[object]:
    if type(raw) is not list or len(raw) != 2:
        raise WireError("a dict item is not a [key, value] pair")
    return raw


def _no_constant(name: str) -> object:
    raise WireError(f"{name} is not written as a bare JSON constant here")


class _Strict:
    """The options of the C scanner: plain dicts, float and int for numbers, strings without
    raw control characters, and no NaN or Infinity literals (the encoding tags those)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)
    memo: dict[object, object] = {}


_scan = _make_scanner(_Strict())


def _name(t: type) -> str:
    module = getattr(t, "__module__", "")
    qualname = getattr(t, "__qualname__", t.__name__)
    return qualname if module == "builtins" else f"{module}.{qualname}"
