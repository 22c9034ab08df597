"""The plain-data codec between the two processes: exact round trips of builtin values, and
nothing but builtin values out of the decoder, whatever text arrives."""

from __future__ import annotations

import collections
import enum
import math

import pytest

from agent2rl.sandbox.wire import MAX_DEPTH, WireError, decode, encode

NAN = float("nan")
INF = float("inf")

ROUND_TRIPS = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    2**63,  # past 64 bits: tagged hex
    -(2**63),
    10**5000,  # beyond Python's 4300-digit decimal cap
    1.5,
    -0.0,
    5e-324,
    1e16,  # repr "1e+16": must come back a float, not an int
    INF,
    -INF,
    "",
    "line\nbreak \x00 é \U0001f600 \udc80",  # a lone surrogate too
    [],
    [1, [2, [3, []]]],
    (),
    (1,),
    ("a", (1.0, None)),
    {"a": 1, (1, 2): [3], frozenset({1}): None, 1.5: 2, None: 3, True: 4, 5: "int key"},
    {},
    {1, 2, "x", (3, 4)},
    set(),
    frozenset({1, frozenset({2})}),
    b"\x00\xff",
    bytearray(b"ab"),
    1 + 2j,
    complex(INF, -0.0),
    [(), {}, set(), frozenset(), b""],
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_builtin_values_round_trip_exactly(value: object) -> None:
    text = encode(value)
    assert text.isascii() and "\n" not in text  # one value, one line
    back = decode(text + "\n")
    assert type(back) is type(value)
    assert back == value
    # The encoding spells out every nested type, dict order and -0.0: equal text, equal shape.
    assert encode(back) == text


def test_nan_round_trips() -> None:
    back = decode(encode([NAN, complex(NAN, 1.0)]))
    assert math.isnan(back[0]) and math.isnan(back[1].real) and back[1].imag == 1.0


def test_dict_order_and_bool_keys_survive() -> None:
    value = {3: "c", True: "t", 0: "zero", 1.5: "f"}
    assert list(decode(encode(value)).items()) == list(value.items())
    assert type(next(iter(decode(encode({True: 1}))))) is bool


class _AlwaysEqualInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class _AlwaysEqualStr(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _Color(enum.IntEnum):
    RED = 5


class _LyingList(list):
    def __iter__(self):  # the list's own storage is what is sent, not what __iter__ says
        return iter([99])


def test_subclasses_are_sent_as_the_builtin_value_they_hold() -> None:
    # The receiver gets a plain int: its == is int's, so the always-true __eq__ is gone.
    back = decode(encode(_AlwaysEqualInt(3)))
    assert type(back) is int and back == 3 and back != 4
    back = decode(encode(_AlwaysEqualStr("abc")))
    assert type(back) is str and back != "xyz"
    point = collections.namedtuple("point", "x y")(1, 2)
    cases = [
        (collections.Counter("aab"), {"a": 2, "b": 1}),
        (collections.OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
        (collections.defaultdict(list, k=[1]), {"k": [1]}),
        (point, (1, 2)),
        (_Color.RED, 5),
        (_LyingList([1, 2]), [1, 2]),
    ]
    for value, plain in cases:
        back = decode(encode(value))
        assert type(back) is type(plain) and back == plain, value


def _generator():
    yield 1


class _Custom:
    def __eq__(self, other: object) -> bool:
        return True


class _FakeClass:
    """Claims to be an int through ``__class__``: isinstance believes it, the codec must not."""

    @property
    def __class__(self):  # type: ignore[override]
        return int


@pytest.mark.parametrize(
    "value",
    [_Custom(), _generator(), lambda: 1, object(), int, _FakeClass(), range(3), [1, _Custom()]],
    ids=["custom-eq", "generator", "function", "object", "type", "fake-class", "range", "nested"],
)
def test_anything_else_cannot_be_sent(value: object) -> None:
    with pytest.raises(WireError, match="not plain data"):
        encode(value)


def test_nesting_and_cycles_are_bounded() -> None:
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError, match="nested"):
        encode(deep)
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(WireError, match="nested"):
        encode(cycle)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "NaN",  # the encoding tags non-finite floats; a bare literal is not it
        "-Infinity",
        "[1] [2]",
        "[1,",
        '{"tuple": [1], "extra": 1}',
        '{"unknown": 1}',
        '{"a": 1}',  # a JSON object is only ever a tag
        '{"set": [[1]]}',  # unhashable member
        '{"dict": [[[1], 2]]}',  # unhashable key
        '{"dict": [[1]]}',
        '{"float": "1.5"}',
        '{"int": "zz"}',
        '{"int": 5}',
        '{"bytes": "0g"}',
        '{"complex": [1, 2]}',
        '"\x01"',  # a raw control character
        "[" * 100_000,
        b"\xff\xfe",
        "1" * 5000,  # a decimal past Python's digit cap
    ],
)
def test_decode_rejects_everything_encode_would_not_write(text: str | bytes) -> None:
    with pytest.raises(WireError):
        decode(text)
