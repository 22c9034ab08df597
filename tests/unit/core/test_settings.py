import pytest

from agent2rl.errors import UserError
from agent2rl.settings import parse_duration, parse_size


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


@pytest.mark.parametrize(
    "text,size", [("200M", 200 * 2**20), ("16G", 16 * 2**30), ("1.5GiB", 3 * 2**29), ("512", 512)]
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "lots", "10X", "-1G", "0M"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(UserError, match="size"):
        parse_size(bad)
