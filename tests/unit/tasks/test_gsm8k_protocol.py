"""GSM8K's default protocol is the paper's: OpenCompass's ``gsm8k_gen_1d7fe4``, as the
reference implementation (RD-Agent ``autorl_bench``, OpenCompass 0.5.1) grades.

The expected prompts below are data, not derived from agent2rl's code: OpenCompass's four
exemplars and the GSM8K test set's first question in the two renderings OpenCompass 0.5.1's
own code builds (its ``PromptTemplate`` in gen mode, then ``VLLMwithChatTemplate``'s default
meta template and ``_convert_chat_messages`` for a chat model; ``LMTemplateParser`` without a
meta template for a model without a chat template), rendered for a chat model through a
Qwen2.5-style ChatML template (the reference's model family) without tools. Each rendering
is spelt out once below; the exemplars' texts are shared by both.
"""

from __future__ import annotations

import json
import shutil

import pytest
from support import FIXTURES

from agent2rl.inference import load_backend
from agent2rl.scoring import OpenCompassGsm8k
from agent2rl.settings import load_settings
from agent2rl.tasks import get_task, prepare_task, task_root

#: Qwen2.5's chat template without its tool branch: a default system message, then ChatML
QWEN_CHATML = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: the GSM8K test set's first question
QUESTION = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and "
    "bakes muffins for her friends every day with four. She sells the remainder at the "
    "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
    "every day at the farmers' market?"
)

#: OpenCompass's four GSM8K exemplars (gsm8k_gen_1d7fe4's in-context turns): the
#: question and the answer, as its config writes them
EXEMPLARS = (
    (
        (
            "Angelo and Melanie want to plan how many hours over the next week they should study "
            "together for their test next week. They have 2 chapters of their textbook to study "
            "and 4 worksheets to memorize. They figure out that they should dedicate 3 hours to "
            "each chapter of their textbook and 1.5 hours for each worksheet. If they plan to "
            "study no more than 4 hours each day, how many days should they plan to study total "
            "over the next week if they take a 10-minute break every hour, include 3 10-minute "
            "snack breaks each day, and 30 minutes for lunch each day?"
        ),
        (
            "Angelo and Melanie think they should dedicate 3 hours to each of the 2 chapters, 3 "
            "hours x 2 chapters = 6 hours total.\n"
            "For the worksheets they plan to dedicate 1.5 hours for each worksheet, 1.5 hours x "
            "4 worksheets = 6 hours total.\n"
            "Angelo and Melanie need to start with planning 12 hours to study, at 4 hours a day, "
            "12 / 4 = 3 days.\n"
            "However, they need to include time for breaks and lunch. Every hour they want to "
            "include a 10-minute break, so 12 total hours x 10 minutes = 120 extra minutes for "
            "breaks.\n"
            "They also want to include 3 10-minute snack breaks, 3 x 10 minutes = 30 minutes.\n"
            "And they want to include 30 minutes for lunch each day, so 120 minutes for breaks + "
            "30 minutes for snack breaks + 30 minutes for lunch = 180 minutes, or 180 / 60 "
            "minutes per hour = 3 extra hours.\n"
            "So Angelo and Melanie want to plan 12 hours to study + 3 hours of breaks = 15 hours "
            "total.\n"
            "They want to study no more than 4 hours each day, 15 hours / 4 hours each day = "
            "3.75\n"
            "They will need to plan to study 4 days to allow for all the time they need.\n"
            "The answer is 4\n"
        ),
    ),
    (
        (
            "Mark's basketball team scores 25 2 pointers, 8 3 pointers and 10 free throws.  "
            "Their opponents score double the 2 pointers but half the 3 pointers and free "
            "throws.  What's the total number of points scored by both teams added together?"
        ),
        (
            "Mark's team scores 25 2 pointers, meaning they scored 25*2= 50 points in 2 "
            "pointers.\n"
            "His team also scores 6 3 pointers, meaning they scored 8*3= 24 points in 3 "
            "pointers\n"
            "They scored 10 free throws, and free throws count as one point so they scored "
            "10*1=10 points in free throws.\n"
            "All together his team scored 50+24+10= 84 points\n"
            "Mark's opponents scored double his team's number of 2 pointers, meaning they scored "
            "50*2=100 points in 2 pointers.\n"
            "His opponents scored half his team's number of 3 pointers, meaning they scored "
            "24/2= 12 points in 3 pointers.\n"
            "They also scored half Mark's team's points in free throws, meaning they scored "
            "10/2=5 points in free throws.\n"
            "All together Mark's opponents scored 100+12+5=117 points\n"
            "The total score for the game is both team's scores added together, so it is "
            "84+117=201 points\n"
            "The answer is 201\n"
        ),
    ),
    (
        (
            "Bella has two times as many marbles as frisbees. She also has 20 more frisbees than "
            "deck cards. If she buys 2/5 times more of each item, what would be the total number "
            "of the items she will have if she currently has 60 marbles?"
        ),
        (
            "When Bella buys 2/5 times more marbles, she'll have increased the number of marbles "
            "by 2/5*60 = 24\n"
            "The total number of marbles she'll have is 60+24 = 84\n"
            "If Bella currently has 60 marbles, and she has two times as many marbles as "
            "frisbees, she has 60/2 = 30 frisbees.\n"
            "If Bella buys 2/5 times more frisbees, she'll have 2/5*30 = 12 more frisbees.\n"
            "The total number of frisbees she'll have will increase to 30+12 = 42\n"
            "Bella also has 20 more frisbees than deck cards, meaning she has 30-20 = 10 deck "
            "cards\n"
            "If she buys 2/5 times more deck cards, she'll have 2/5*10 = 4 more deck cards.\n"
            "The total number of deck cards she'll have is 10+4 = 14\n"
            "Together, Bella will have a total of 14+42+84 = 140 items\n"
            "The answer is 140\n"
        ),
    ),
    (
        (
            "A group of 4 fruit baskets contains 9 apples, 15 oranges, and 14 bananas in the "
            "first three baskets and 2 less of each fruit in the fourth basket. How many fruits "
            "are there?"
        ),
        (
            "For the first three baskets, the number of apples and oranges in one basket is "
            "9+15=24\n"
            "In total, together with bananas, the number of fruits in one basket is 24+14=38 for "
            "the first three baskets.\n"
            "Since there are three baskets each having 38 fruits, there are 3*38=114 fruits in "
            "the first three baskets.\n"
            "The number of apples in the fourth basket is 9-2=7\n"
            "There are also 15-2=13 oranges in the fourth basket\n"
            "The combined number of oranges and apples in the fourth basket is 13+7=20\n"
            "The fourth basket also contains 14-2=12 bananas.\n"
            "In total, the fourth basket has 20+12=32 fruits.\n"
            "The four baskets together have 32+114=146 fruits.\n"
            "The answer is 146\n"
        ),
    ),
)


def _human(question: str) -> str:
    """gsm8k_gen_1d7fe4's HUMAN turn for ``question``."""
    return f"Question: {question}\nLet's think step by step\nAnswer:"


#: a chat model's prompt: Qwen2.5's default system message, each turn as a ChatML message
#: (OpenCompass's meta template ends every user message with a newline), then the generation
#: prompt
REFERENCE_CHAT_PROMPT = (
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    + "".join(
        f"<|im_start|>user\n{_human(q)}\n<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n"
        for q, a in EXEMPLARS
    )
    + f"<|im_start|>user\n{_human(QUESTION)}\n<|im_end|>\n<|im_start|>assistant\n"
)

#: a model without a chat template: the turns' texts joined by newlines
REFERENCE_PLAIN_PROMPT = "".join(f"{_human(q)}\n{a}\n" for q, a in EXEMPLARS) + _human(QUESTION)


@pytest.fixture(scope="module")
def gsm8k():
    """gsm8k, default options, imported from the jsonl fixture into the session's store."""
    task = get_task("gsm8k")
    task.import_data(FIXTURES / "gsm8k", task_root(task, load_settings().task_store))
    return task, prepare_task(task, load_settings().task_store)


@pytest.fixture(scope="module")
def qwen_chat(tiny, tmp_path_factory):
    """The tiny model with the Qwen2.5-style chat template: a real chat-model backend."""
    path = tmp_path_factory.mktemp("chat") / "tiny-qwen-chat"
    shutil.copytree(tiny.path, path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": QWEN_CHATML})
    )
    return path


@pytest.mark.parametrize(
    ("chat_template", "expected"),
    [(True, REFERENCE_CHAT_PROMPT), (False, REFERENCE_PLAIN_PROMPT)],
    ids=["chat-template", "no-chat-template"],
)
def test_default_prompt_is_the_references_byte_for_byte(
    gsm8k, tiny, qwen_chat, chat_template: bool, expected: str
) -> None:
    """A chat model gets OpenCompass's turns through its chat template, a model without one
    OpenCompass's plain rendering of them; both with the reference's settings: 512 new
    tokens, no stop string but the end of sequence."""
    task, prepared = gsm8k
    assert task.opts["protocol"] == "opencompass"
    fmt = task.prompt_format(prepared)
    backend = load_backend(qwen_chat if chat_template else tiny.path)
    assert fmt.prompt(backend, {"question": QUESTION}) == expected
    gen = fmt.generation(backend)
    assert gen.max_new_tokens == 512 and gen.stop == ()


def test_braces_in_a_question_are_text(gsm8k, tiny) -> None:
    task, prepared = gsm8k
    fmt = task.prompt_format(prepared)
    prompt = fmt.prompt(load_backend(tiny.path), {"question": "Is {x} = {}?"})
    assert prompt.endswith("Question: Is {x} = {}?\nLet's think step by step\nAnswer:")


def test_default_grades_with_opencompass_rule_and_gold(gsm8k, tiny) -> None:
    task, prepared = gsm8k
    assert isinstance(task.scorer(prepared), OpenCompassGsm8k)
    samples = task.samples(prepared, "private")
    assert [s.target for s in samples] == ["83", "420", "43", "8", "1000", "21"]
    desc = task.description(prepared)
    assert "gsm8k_gen_1d7fe4" in desc and "The answer is N" in desc
    short = get_task("gsm8k", {"max_new_tokens": "16"})
    prepare_task(short, load_settings().task_store)
    result = short.evaluate(load_backend(tiny.path), prepared, limit=2)
    assert result.n_items == 2 and 0.0 <= result.score <= 100.0
