"""The tiny model's tokenizer, as the model store saves it and AutoTokenizer loads it back."""

import json

import pytest
from transformers import AutoTokenizer

from agent2rl.models.tokenizer import SPECIAL_TOKENS, build_tokenizer
from agent2rl.tasks.arith_lite import FORMAT, generate_split


@pytest.fixture(scope="module")
def tok(tiny):
    return AutoTokenizer.from_pretrained(tiny.path)


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def test_every_digit_is_one_token_and_never_merged(tok) -> None:
    digit_ids = [_ids(tok, d) for d in "0123456789"]
    assert all(len(ids) == 1 for ids in digit_ids)
    assert len({ids[0] for ids in digit_ids}) == 10
    # a number is its digits, whatever surrounds it
    for text in ("1234567890", " 42", "x42y", "#### 42", "= 42\n"):
        pieces = tok.convert_ids_to_tokens(_ids(tok, text))
        digits = [p for p in pieces if any(c.isdigit() for c in p)]
        assert digits == [c for c in text if c.isdigit()], (text, pieces)


def test_round_trip_of_any_text(tok) -> None:
    texts = [
        "Question: Ava has 23 apples.\nAnswer: 23 + 45 = 68\n#### 68",
        "tabs\tand  double  spaces, trailing space ",
        "unicode: héllo wörld ☃ 你好 \U0001f600",
        "".join(chr(c) for c in range(32, 127)),
        "",
    ]
    for text in texts:
        assert tok.decode(_ids(tok, text)) == text
    assert tok.unk_token is None  # byte-level: nothing is ever unknown


def test_words_of_the_lite_tasks_are_whole_tokens(tok) -> None:
    row = generate_split(1, 1)[0]
    prompt = FORMAT.template.format(**row)
    assert len(_ids(tok, prompt)) < len(prompt) / 2
    for word in ("Question", " apples", " soapbar", " sinkbasin", "####", " arrive"):
        assert len(_ids(tok, word)) == 1, word


def test_a_prompt_tokenizes_as_a_prefix_of_prompt_and_completion(tok) -> None:
    """Training tokenizes prompt + completion; the grader the prompt alone: the same ids."""
    for row in generate_split(5, 60):
        prompt = FORMAT.template.format(**row)
        full = prompt + FORMAT.completion_template.format(**row)
        assert _ids(tok, full)[: len(_ids(tok, prompt))] == _ids(tok, prompt)
    episode = "Your task is to: put a mug in desk.\nYou arrive at desk 1.\n>"
    assert _ids(tok, episode + " take mug 1 from desk 1\n")[: len(_ids(tok, episode))] == _ids(
        tok, episode
    )


def test_specials_and_saved_files(tok, tiny) -> None:
    assert [tok.pad_token, tok.bos_token, tok.eos_token] == list(SPECIAL_TOKENS)
    assert tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2]
    assert _ids(tok, "abc") == tok("abc").input_ids  # no BOS/EOS added when encoding
    cfg = json.loads((tiny.path / "config.json").read_text())
    assert cfg["vocab_size"] == len(tok) and cfg["eos_token_id"] == tok.eos_token_id
    # the same tokenizer whether built here or loaded from the store
    assert build_tokenizer().backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


def test_vocab_size_below_the_byte_alphabet_is_refused() -> None:
    with pytest.raises(ValueError, match="byte alphabet"):
        build_tokenizer(100)
