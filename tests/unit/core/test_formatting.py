from agent2rl.formatting import DASH, format_bytes, format_duration


def test_format_duration() -> None:
    assert format_duration(42) == "42s"
    assert format_duration(125) == "2m05s"
    assert format_duration(3723) == "1h02m03s"
    assert format_duration(-3) == "-3s"  # a deadline passed keeps its sign
    assert format_duration(None) == DASH


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(5 * 2**20) == "5.0 MiB"
    assert format_bytes(3 * 2**40) == "3072.0 GiB"
    assert format_bytes(None) == DASH
