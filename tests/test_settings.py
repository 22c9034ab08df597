import pytest

from agent2rl.errors import UserError
from agent2rl.settings import format_duration, parse_duration


@pytest.mark.parametrize(
    "text,seconds",
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("1.5h", 5400), ("45", 45), (" 2M ", 120)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "abc", "10x", "-5m", "0s", "m"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(UserError, match="duration"):
        parse_duration(bad)


def test_format_duration() -> None:
    assert format_duration(42) == "42s"
    assert format_duration(125) == "2m05s"
    assert format_duration(3723) == "1h02m03s"
    assert format_duration(-3) == "0s"
