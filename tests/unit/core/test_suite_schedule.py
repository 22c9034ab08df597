"""The suite's own two-worker schedule (tests/conftest.py) names its training tests by
function name: a renamed test would silently leave the group and could run beside another."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import TRAINING_TESTS

TESTS = Path(__file__).resolve().parents[2]


def test_every_training_test_name_is_a_test_function() -> None:
    defined = {
        m.group(1)
        for path in TESTS.rglob("test_*.py")
        for m in re.finditer(r"^def (test_\w+)\(", path.read_text(), re.M)
    }
    assert TRAINING_TESTS <= defined, TRAINING_TESTS - defined
