"""ALFWorld's default protocol is the paper's: the ReAct prompt of the reference
implementation's evaluator (RD-Agent ``rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/
eval.py``: ``alfworld_run`` and the prompt assembly in ``ALFWorldEvaluator.run_eval``, from
ReAct's ``alfworld.ipynb``).

The expected prompt below is data: what the reference's code builds for a fixed game state
(its ``"\\n".join(ob.split("\\n\\n")[1:])`` intro, the two ``react_put`` exemplars, then
``" {action}\\n{observation}\\n>"`` per step, with ``process_ob`` and the ``think:`` -> "OK."
rule), for the replies and observations in :data:`REPLIES` and :data:`OBSERVATIONS`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from agent2rl.inference import load_backend
from agent2rl.settings import load_settings
from agent2rl.solvers.episode import EpisodeState
from agent2rl.tasks import get_task, prepare_task
from agent2rl.tasks.alfworld import protocol
from agent2rl.tasks.alfworld.protocol import (
    REACT_INSTRUCTION,
    EpisodeFormat,
    build_prompt,
    react_action,
    react_examples_key,
    react_intro,
    split_intro,
)

#: sha256 of ReAct's prompts/alfworld_3prompts.json (ysymyth/ReAct), which RD-Agent ships
#: unchanged as benchmarks/alfworld/react_prompts.json
REACT_PROMPTS_SHA256 = "a10976b4ae99f4802aa9e621933bb71065ae103f2bd273a24466ab1005fbc45a"

REACT = EpisodeFormat(
    max_steps=50, history=10, max_prompt_chars=6000, max_new_tokens=100, protocol="react"
)
GAME_TYPE = "pick_and_place_simple"
RESET = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a cabinet 1, a countertop 1, a fridge 1, and a sinkbasin 1.\n\n"
    "Your task is to: put some apple in fridge."
)
#: the model's replies (as generation returns them, cut at the newline) and what the game
#: answered to each action
REPLIES = [
    " think: To solve the task, I need to find and take an apple, then put it in fridge.",
    "go to countertop 1  ",
    " take apple 1 from countertop 1",
    "go to fridge 1",
]
OBSERVATIONS = [
    "Nothing happens.",
    "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 1.",
    "You pick up the apple 1 from the countertop 1.",
    "You arrive at loc 7. The fridge 1 is closed.",
]

REFERENCE_PROMPT = (
    "Interact with a household to solve a task. Here are two examples.\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet "
    "4, a cabinet 3, a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 1, a "
    "diningtable 3, a diningtable 2, a diningtable 1, a drawer 1, a fridge 1, a "
    "garbagecan 1, a microwave 1, a sidetable 1, a sinkbasin 1, a stoveburner 4, a "
    "stoveburner 3, a stoveburner 2, a stoveburner 1, and a toaster 1.\n"
    "Your task is to: find some apple and put it in sidetable.\n"
    "> think: To solve the task, I need to find and take an apple, then put it in "
    "sidetable.\n"
    "OK.\n"
    "> think: First I need to find an apple. An apple is more likely to appear in "
    "fridges (1), diningtables (1-3), sidetables (1), countertops (1), sinkbasins "
    "(1), garbagecan (1). I can check one by one, starting with fridge 1.\n"
    "OK.\n"
    "> go to fridge 1\n"
    "The fridge 1 is closed.\n"
    "> open fridge 1\n"
    "You open the fridge 1. The fridge 1 is open. In it, you see a lettuce 2, a mug "
    "2, a potato 2, and a tomato 1.\n"
    "> go to diningtable 1\n"
    "On the diningtable 1, you see nothing.\n"
    "> go to diningtable 2\n"
    "On the diningtable 2, you see a pineapple 1.\n"
    "> go to diningtable 3\n"
    "On the diningtable 3, you see a bowl 2, a bowl 1, a bread 2, and a bread 1.\n"
    "> go to sidetable 1\n"
    "On the sidetable 1, you see a cup 1, a lettuce 1, a peppershaker 3, a potato 1, "
    "and a saltshaker 1.\n"
    "> go to countertop 1\n"
    "On the countertop 1, you see a butterknife 1, a dishsponge 1, and a soapbottle 1.\n"
    "> go to sinkbasin 1\n"
    "On the sinkbasin 1, you see a cup 2, a egg 1, a mug 1, and a potato 3.\n"
    "> go to garbagecan 1\n"
    "On the garbagecan 1, you see a apple 3, and a egg 3.\n"
    "> think: Now I find an apple (3). Next, I need to take it.\n"
    "> take apple 3 from garbagecan 1\n"
    "You pick up the apple 3 from the garbagecan 1.\n"
    "> think: Now I find an apple (3). Next, I need to put it in/on sidetable 1.\n"
    "OK.\n"
    "> go to sidetable 1\n"
    "On the sidetable 1, you see a cup 1, a lettuce 1, a peppershaker 3, a potato 1, "
    "and a saltshaker 1.\n"
    "> put apple 3 in/on sidetable 1\n"
    "You put the apple 3 in/on the sidetable 1.\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet "
    "4, a cabinet 3, a cabinet 2, a cabinet 1, a countertop 1, a garbagecan 1, a "
    "handtowelholder 2, a handtowelholder 1, a sinkbasin 2, a sinkbasin 1, a toilet "
    "1, a toiletpaperhanger 1, and a towelholder 1.\n"
    "Your task is to: put some spraybottle on toilet.\n"
    "> think: To solve the task, I need to find and take a sparybottle, then put it "
    "on toilet.\n"
    "OK.\n"
    "> think: First I need to find a spraybottle. A spraybottle is more likely to "
    "appear in cabinet (1-4), countertop (1), toilet (1), sinkbasin (1-2), garbagecan "
    "(1). I can check one by one, starting with cabinet 1.\n"
    "OK.\n"
    "> go to cabinet 1\n"
    "On the cabinet 1, you see a cloth 1, a soapbar 1, a soapbottle 1.\n"
    "> go to cabinet 2\n"
    "The cabinet 2 is closed.\n"
    "> open cabinet 2\n"
    "You open the cabinet 2. The cabinet 2 is open. In it, you see a candle 1, and a "
    "spraybottle 2.\n"
    "> think: Now I find a spraybottle (2). Next, I need to take it.\n"
    "> take spraybottle 2 from cabinet 2\n"
    "You pick up the spraybottle 2 from the cabinet 2.\n"
    "> think: Now I take a spraybottle (2). Next, I need to put it in/on toilet 1.\n"
    "OK.\n"
    "> go to toilet 1\n"
    "On the toilet 1, you see a soapbottle 2.\n"
    "> put spraybottle 2 in/on toilet 1\n"
    "You put the spraybottle 2 in/on the toilet 1.\n"
    "\n"
    "Here is the task.\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet "
    "1, a countertop 1, a fridge 1, and a sinkbasin 1.\n"
    "Your task is to: put some apple in fridge.\n"
    "> think: To solve the task, I need to find and take an apple, then put it in fridge.\n"
    "OK.\n"
    "> go to countertop 1\n"
    "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 1.\n"
    "> take apple 1 from countertop 1\n"
    "You pick up the apple 1 from the countertop 1.\n"
    "> go to fridge 1\n"
    "The fridge 1 is closed.\n"
    ">"
)


def _play() -> tuple[list[str], list[str]]:
    """The prompts at each step and the actions, through the protocol as the grader plays."""
    room, goal = split_intro(RESET)
    steps: list[tuple[str, str]] = []
    shown, prompts, actions = room, [], []
    for reply, observation in zip(REPLIES, OBSERVATIONS, strict=True):
        state = EpisodeState(goal, list(steps), shown, [], GAME_TYPE)
        prompts.append(REACT.prompt(state))
        actions.append(REACT.parse(reply, state))
        steps.append((shown, actions[-1]))
        shown = observation
    prompts.append(REACT.prompt(EpisodeState(goal, steps, shown, [], GAME_TYPE)))
    return prompts, actions


def test_react_prompt_is_the_references_byte_for_byte() -> None:
    prompts, actions = _play()
    assert prompts[-1] == REFERENCE_PROMPT
    # every earlier prompt is the reference's at that step: a prefix ending with ">"
    for p in prompts[:-1]:
        assert REFERENCE_PROMPT.startswith(p) and p.endswith("\n>")
    assert prompts[0].endswith("Your task is to: put some apple in fridge.\n>")
    assert actions[0].startswith("think: ") and actions[1] == "go to countertop 1"


@pytest.mark.parametrize(
    "reply,action",
    [
        # the reference: action = reply.strip(); nothing else (no admissible-action matching)
        ("go to desk 1", "go to desk 1"),
        ("  go to desk 1 \t", "go to desk 1"),
        ("> go to desk 1", "> go to desk 1"),
        ("Go to Desk 1.", "Go to Desk 1."),
        ("think: the mug is likely in a cabinet", "think: the mug is likely in a cabinet"),
        ("", ""),
        ("   ", ""),
        ("go to desk 1\nmore", "go to desk 1"),  # generation stops at the newline
    ],
)
def test_react_action_is_the_stripped_reply(reply: str, action: str) -> None:
    assert react_action(reply) == action
    assert REACT.parse(reply, None) == action


def test_exemplars_are_reacts_file_and_picked_by_task_type() -> None:
    path = Path(protocol.__file__).with_name(protocol.REACT_PROMPTS_FILE)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == REACT_PROMPTS_SHA256
    types = {
        "pick_and_place_simple": "put",
        "pick_clean_then_place_in_recep": "clean",
        "pick_heat_then_place_in_recep": "heat",
        "pick_cool_then_place_in_recep": "cool",
        "look_at_obj_in_light": "examine",
        "pick_two_obj_and_place": "puttwo",
    }
    examples = json.loads(path.read_text())
    for group, key in types.items():
        assert react_examples_key(group) == key
        head = build_prompt("g", [], "room", [], REACT, group=group)
        assert head == (
            REACT_INSTRUCTION
            + examples[f"react_{key}_1"]
            + examples[f"react_{key}_0"]
            + "\nHere is the task.\nroom\nYour task is to: g.\n>"
        )
    with pytest.raises(ValueError, match="no ReAct exemplars for task type 'sliced'"):
        react_examples_key("sliced")


def test_react_intro_matches_the_references_on_real_games(alfworld_lite) -> None:
    """split_intro then react_intro gives back the reference's intro for every game's reset."""
    task, prepared = alfworld_lite
    games = task.environment(prepared, "private")
    for game in games.games:
        env = games.engine(game)
        try:
            raw = env.reset()[0][0]
        finally:
            env.close()
        assert react_intro(*split_intro(raw)) == "\n".join(raw.split("\n\n")[1:])


def test_task_defaults_and_options() -> None:
    full, lite = get_task("alfworld"), get_task("alfworld-lite")
    fmt = full.episode_format()
    assert fmt.protocol == "react" and fmt.max_new_tokens == 100 and fmt.max_steps == 50
    assert not fmt.use_chat_template and fmt.stop == ("\n",)
    ours = get_task("alfworld", {"protocol": "transcript"}).episode_format()
    assert ours.protocol == "transcript" and ours.max_new_tokens == 64 and ours.use_chat_template
    assert lite.episode_format().protocol == "transcript"  # the react prompt does not fit
    assert get_task("alfworld-lite", {"protocol": "react"}).episode_format().max_new_tokens == 40
    with pytest.raises(Exception, match="unknown protocol 'chat'"):
        get_task("alfworld", {"protocol": "chat"}).episode_format()
    assert EpisodeFormat.from_dict(fmt.to_dict()) == fmt
    assert "react_prompts.json" in full.workspace_files()


class _Recording:
    """A real backend that also keeps every prompt it is given."""

    def __init__(self, backend) -> None:
        self.backend, self.prompts = backend, []

    def generate(self, prompts, settings):
        self.prompts += prompts
        return self.backend.generate(prompts, settings)

    def __getattr__(self, name):
        return getattr(self.backend, name)


def test_react_plays_chat_models_with_the_text_prompt(alfworld_lite, tiny, tmp_path) -> None:
    """The reference's evaluator prompts every local model by text completion: a model with a
    chat template gets the same untemplated prompt."""
    chat_dir = tmp_path / "tiny-chat"
    shutil.copytree(tiny.path, chat_dir)
    config = json.loads((chat_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    )
    (chat_dir / "tokenizer_config.json").write_text(json.dumps(config))
    _, prepared = alfworld_lite
    task = get_task(
        "alfworld-lite",
        {
            "n_train": "6",
            "n_eval": "6",
            "n_validation": "6",
            "protocol": "react",
            "max_steps": "2",
            "max_new_tokens": "8",
        },
    )
    prepare_task(task, load_settings().task_store)
    backend = _Recording(load_backend(chat_dir, "transformers"))
    try:
        result = task.evaluate(backend, prepared, limit=1)
    finally:
        backend.close()
    assert result.n_items == 1 and 1 <= len(backend.prompts) <= 2
    for prompt in backend.prompts:
        assert prompt.startswith(REACT_INSTRUCTION) and "<|user|>" not in prompt
