import pytest

from agent2rl.scoring import answers_match, extract_final_answer


@pytest.mark.parametrize(
    "text,expected",
    [
        ("23 + 45 = 68\n#### 68", "68"),
        ("so 1,234 apples\n#### 1,234", "1234"),
        ("first 3 then 7", "7"),
        ("#### -5", "-5"),
        ("#### 12 then 9", "12"),
        ("we get 7 ####", "7"),
        ("the result is 3/4", "3/4"),
        ("no numbers", None),
        ("", None),
        ("#### 42\n#### 43", "43"),
    ],
)
def test_extract_final_answer(text: str, expected: str | None) -> None:
    assert extract_final_answer(text) == expected


def test_answers_match_numeric_forms() -> None:
    assert answers_match("68", "68")
    assert answers_match("68", "68.0")
    assert answers_match("0.5", "1/2")
    assert not answers_match("68", "69")
    assert not answers_match("68", None)


def test_answers_match_uses_math_verify_for_latex() -> None:
    assert answers_match("0.5", "\\frac{1}{2}")
    assert not answers_match("0.5", "\\frac{1}{3}")
