"""webshop's defaults are the paper's reference's (RD-Agent ``autorl_bench``, its
``benchmarks/webshop``): the score is the share of sessions with reward >= 0.5, the prompt
its chat ReAct text (the page's actions listed, a 5-step window), and an action the page
does not offer goes to the environment (which stays on the page).

The expected prompt texts below are data, not derived from agent2rl's code: the reference
evaluator's system message and user prompt, spelt out once.
"""

from __future__ import annotations

import pytest
from support.taskdata import _webshop_download

from agent2rl.errors import UserError
from agent2rl.inference.backend import GenerationSettings
from agent2rl.tasks.webshop.games import ShopGames
from agent2rl.tasks.webshop.outcome import PurchaseOutcome
from agent2rl.tasks.webshop.protocol import (
    REACT_HEAD,
    REACT_SYSTEM,
    EpisodeFormat,
    chat_messages,
    react_message,
)
from agent2rl.tasks.webshop.store import catalog_dir

#: the reference's system message, verbatim
SYSTEM = (
    "You are a helpful shopping assistant browsing an e-commerce website. Given a user "
    "instruction, current observation, and available actions, pick the best action to find "
    "and purchase a matching product. Output ONLY one action (e.g., 'search[red shoes]', "
    "'click[buy now]') with NO extra text, NO explanation."
)

#: the reference's user prompt for one step, verbatim, for the instruction "i need a red
#: shirt", the actions below, two earlier steps and the current page
USER = """You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction.

Instruction: i need a red shirt

Available actions:
  click[back to search]
  click[< prev]
  click[b01]

Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action.

Now it's your turn:

Observation 1: PAGE-2
Action 1: search[red shirt]

Observation 2: PAGE-3
Action 2: click[b01]

Observation 3: PAGE-3
Action 3:"""  # noqa: E501


def test_the_react_prompt_is_the_references() -> None:
    assert REACT_SYSTEM == SYSTEM
    assert REACT_HEAD.startswith("You are shopping on an e-commerce website.")
    fmt = EpisodeFormat(max_steps=50, history=5, max_prompt_chars=0, max_new_tokens=100,
                        protocol="react")  # fmt: skip
    steps = [("PAGE-1", "search[red shirt]"), ("PAGE-2", "click[b01]")]
    actions = ["click[back to search]", "click[< prev]", "click[b01]"]
    got = react_message("i need a red shirt", steps, "PAGE-3", actions, fmt)
    assert got == SYSTEM + "\n\n" + USER  # a model without a chat template: one text
    # a chat model: the system message as a system turn, as the reference's llm_engine.chat
    assert fmt.chat_message(type("S", (), {"goal": "i need a red shirt", "steps": steps,
                            "observation": "PAGE-3", "admissible": actions})()) == USER  # fmt: skip
    assert fmt.system_message == SYSTEM
    assert chat_messages("i need a red shirt", steps, "PAGE-3", actions, fmt) == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER},
    ]
    # the search bar as the reference lists it; a 5-step window (steps 1-2 of 7 dropped)
    first = react_message("g", [], "P0", ["search[<query>]", "click[x]"], fmt)
    assert "Available actions:\n  search[<your query>]\n  click[x]\n" in first
    assert first.endswith("Now it's your turn:\n\nObservation 1: P0\nAction 1:")
    long = [(f"P{i}", f"click[a{i}]") for i in range(7)]
    windowed = react_message("g", long, "P7", [], fmt)
    assert "Observation 2:" not in windowed and "\nObservation 3: P3\nAction 3: click[a2]\n" in (
        windowed
    )
    assert windowed.endswith("\nObservation 8: P7\nAction 8:")


def test_an_action_the_page_does_not_offer_goes_to_the_environment(tmp_path) -> None:
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("webshop-lite", {"n_products": 60, "n_train": 20, "n_eval": 8,
                                     "n_validation": 8})  # fmt: skip
    prepared = prepare_task(task, tmp_path)
    goals = prepared.private / "goals.jsonl"
    strict = ShopGames(catalog_dir(prepared), goals, max_steps=5)
    ep = strict.open(strict.games[0])
    with pytest.raises(ValueError, match="not on this page"):
        ep.step("click[no such button]")
    assert ep.steps == 0
    lenient = ShopGames(catalog_dir(prepared), goals, max_steps=2, lenient=True)
    ep = lenient.open(lenient.games[0])
    page = ep.last.observation
    result = ep.step("click[no such button]")
    assert (result.observation, result.kind, result.reward, ep.steps) == (page, "invalid", 0, 1)
    assert not result.done and ep.step("search[x y]").done  # the step limit still holds


class _Shopper:
    """A scripted chat model for the reference's prompt: first an action no page offers,
    then a search for the instruction, then the first product, then buy."""

    name = "scripted-shopper"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: list[str], settings: GenerationSettings) -> list[str]:
        out = []
        for p in prompts:
            self.prompts.append(p)
            # the reference's two turns: its system message, then the user text
            assert p.startswith("<chat><system>" + SYSTEM + "<user>You are shopping")
            step = int(p.rsplit("Action ", 1)[1].rstrip(":"))
            instruction = p.split("Instruction: ", 1)[1].split("\n", 1)[0]
            if step == 1:
                out.append("click[nothing here]")
            elif step == 2:
                out.append(f"Action: search[{instruction[:60]}]")
            elif step == 3:
                first = p.rsplit("Available actions:\n", 1)[1].split("\n")[2].strip()
                out.append(first)  # the first product (after back to search, next >)
            else:
                out.append("click[buy now]")
        return out

    def chat_prompt(self, messages):
        return "<chat>" + "".join(f"<{m['role']}>{m['content']}" for m in messages)

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        pass


def test_webshop_defaults_score_reward_at_least_half(a2home) -> None:
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task, task_root

    task = get_task("webshop", {"n_walkthroughs": "20"})
    assert task.version == "3"
    store = load_settings().task_store
    task.import_data(_webshop_download(), task_root(task, store))
    prepared = prepare_task(task, store)
    assert task.eval_settings()["scorer"] == {"scorer": "webshop-purchase", "by": "half"}
    solver = task.eval_settings()["solver"]
    assert solver["invalid"] == "env" and solver["protocol"]["protocol"] == "react"
    assert solver["system_turn"] is True
    policy = _Shopper()
    result = task.evaluate(policy, prepared, limit=10)
    rewards = [i.meta["reward"] for i in result.items]
    assert len(rewards) == 10 and any(r > 0 for r in rewards)
    assert result.score == pytest.approx(100.0 * sum(r >= 0.5 for r in rewards) / 10)
    assert result.details["score_by"] == "half"
    # the invalid first action used a turn and left the search page as it was
    second = [p for p in policy.prompts if p.endswith("Action 2:")]
    assert second and all("Observation 1: WebShop [SEP] Instruction:" in p for p in second)
    assert all("Action 1: click[nothing here]" in p for p in second)
    assert all(i.meta["steps"] == 4 for i in result.items)
    # the earlier defaults stay options
    old = get_task("webshop", {"n_walkthroughs": "20", "score": "reward",
                               "protocol": "transcript", "invalid": "refuse"})  # fmt: skip
    prepare_task(old, store)
    assert old.eval_hash({"b": 1}) != task.eval_hash({"b": 1})
    assert isinstance(old.scorer(prepared), PurchaseOutcome)
    with pytest.raises(UserError, match="invalid=nope: use refuse, env"):
        get_task("webshop", {"invalid": "nope"}).lenient()
