"""The ALFWorld tasks: the episode protocol, deterministic grading of a fixed model through
the real engine, the workspace an agent gets, and the official data's import and its errors."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from support.cli import run_cli

from agent2rl.errors import UserError
from agent2rl.tasks.alfworld.protocol import (
    EpisodeFormat,
    build_chat_message,
    build_prompt,
    completion_for,
    parse_action,
    split_intro,
    transcript,
)

FMT = EpisodeFormat(max_steps=20, history=2, max_prompt_chars=300, max_new_tokens=40)


@pytest.mark.parametrize(
    "reply,action",
    [
        (" take mug 1 from desk 1\nmore", "take mug 1 from desk 1"),
        ("\n\n  > go to  Desk 1.  ", "go to desk 1"),
        ("Action: open drawer 1", "open drawer 1"),
        ("", ""),
        ("   \n  ", ""),
    ],
)
def test_parse_action(reply, action) -> None:
    assert parse_action(reply) == action


def test_prompt_keeps_task_observation_and_actions_and_trims_old_steps() -> None:
    steps = [(f"You arrive at shelf {i}. " + "x" * 60, f"go to shelf {i + 1}") for i in range(6)]
    adm = ["go to desk 1", "help", "look"]
    p = build_prompt("put a mug in desk", steps, "On the desk 1, you see a mug 1.", adm, FMT)
    assert p.startswith("Your task is to: put a mug in desk.\n") and len(p) <= FMT.max_prompt_chars
    assert p.endswith("On the desk 1, you see a mug 1.\nAdmissible actions: go to desk 1, look\n>")
    assert "> go to shelf 6\n" in p and "shelf 3" not in p  # newest kept, oldest dropped
    chat = build_chat_message("put a mug in desk", steps, "obs", adm, FMT)
    assert chat.endswith("exactly as listed above.") and not chat.endswith(">")
    wide = EpisodeFormat(max_steps=20, history=3, max_prompt_chars=10_000, max_new_tokens=40)
    assert build_prompt("g", steps, "o", adm, wide).count("> go to shelf") == 3


def test_transcript_windows_are_the_graders_prompts() -> None:
    """Every prompt plus its action is a stretch of the episode's transcript (no action
    list): the property that lets a base model train on whole episodes at once."""
    fmt = EpisodeFormat(
        max_steps=20,
        history=4,
        max_prompt_chars=10_000,
        max_new_tokens=40,
        show_admissible=False,
    )
    pairs = [
        (
            "You are in the middle of a room.  Looking quickly around you, you see a desk 1.",
            "go to desk 1",
        ),
        ("You arrive at desk 1. On the desk 1, you see a mug 1.", "take mug 1 from desk 1"),
        ("You pick up the mug 1 from the desk 1.", "go to shelf 1"),
        ("You arrive at shelf 1.", "move mug 1 to shelf 1"),
    ]
    task, pieces = transcript("put a mug in shelf", pairs)
    for t in range(len(pairs)):
        for j in range(t + 1):
            window = task + "".join(o + a for o, a in pieces[j:t]) + pieces[t][0]
            fmt_j = dataclasses.replace(fmt, history=t - j)
            assert window == build_prompt("put a mug in shelf", pairs[:t], pairs[t][0], [], fmt_j)
            assert pieces[t][1] == completion_for(pairs[t][1])
    assert "  " not in task + "".join(o for o, _ in pieces)  # observations on one line


def test_split_intro() -> None:
    intro = (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking "
        "quickly around you, you see a desk 1.\n\nYour task is to: put some pen on desk."
    )
    assert split_intro(intro) == (
        "You are in the middle of a room. Looking quickly around you, you see a desk 1.",
        "put some pen on desk",
    )


def test_evaluation_is_deterministic(alfworld_lite, tiny) -> None:
    from agent2rl.inference import load_backend

    task, prepared = alfworld_lite
    backend = load_backend(tiny.path, "transformers")
    try:
        first = task.evaluate(backend, prepared, limit=3)
        second = task.evaluate(backend, prepared, limit=3)
    finally:
        backend.close()
    assert [i.to_dict() for i in first.items] == [i.to_dict() for i in second.items]
    assert len(first.items) == 3
    for item in first.items:
        assert item.meta["group"] in first.details["by_group"]
        assert 1 <= item.meta["steps"] <= task.opts["max_steps"]
        assert item.score == (1.0 if item.correct else 0.0)
    assert first.score == 100.0 * sum(i.correct for i in first.items) / 3


def test_a_warm_task_keeps_its_game_workers_until_closed(alfworld_lite, tiny, monkeypatch) -> None:
    """With keep_environments (a warm grader's task) the games' worker processes serve
    evaluation after evaluation, with a cold evaluation's results; close() stops them. A
    cold task's evaluation stops its workers when it ends."""
    import agent2rl.tasks.alfworld as alfworld
    from agent2rl.inference import load_backend
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    monkeypatch.setattr(alfworld, "MIN_GAMES_FOR_WORKERS", 1)  # workers for the 6 test games
    opts, _ = alfworld_lite
    task = get_task("alfworld-lite", {**opts.opts, "max_steps": 3})
    prepared = prepare_task(task, load_settings().task_store)
    backend = load_backend(tiny.path, "transformers")
    try:
        cold = task.evaluate(backend, prepared, limit=3)
        assert task._kept_pools == {}
        task.keep_environments = True
        first = task.evaluate(backend, prepared, limit=3)
        (pool,) = task._kept_pools.values()
        procs = [w.proc for w in pool._workers]
        assert len(procs) >= 2 and all(p.is_alive() for p in procs)
        second = task.evaluate(backend, prepared, limit=3)
        assert [w.proc for w in pool._workers] == procs
    finally:
        task.close()
        backend.close()
    assert not any(p.is_alive() for p in procs) and task._kept_pools == {}
    assert [i.to_dict() for i in cold.items] == [i.to_dict() for i in first.items]
    assert [i.to_dict() for i in first.items] == [i.to_dict() for i in second.items]


def test_eval_hash_covers_the_protocol(alfworld_lite) -> None:
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task, _ = alfworld_lite
    other = get_task("alfworld-lite", {**task.opts, "history": 3})
    with pytest.raises(RuntimeError, match="prepare_task"):  # the hash covers the data
        other.eval_hash({"b": 1})
    prepare_task(other, load_settings().task_store)
    assert task.eval_hash({"b": 1}) != other.eval_hash({"b": 1})


def test_workspace_has_protocol_client_and_walkthroughs(tmp_path, alfworld_lite, tiny) -> None:
    from agent2rl.rundir import RunPaths
    from agent2rl.workspace import build_workspace

    task, prepared = alfworld_lite
    paths = RunPaths(tmp_path / "run")
    build_workspace(paths, task, prepared, tiny)
    data = paths.data
    assert EpisodeFormat.from_dict(json.loads((data / "eval_format.json").read_text())) == (
        task.episode_format()
    )
    assert (data / "protocol.py").read_text() == (
        (task.workspace_files()["protocol.py"]).read_text()
    )
    assert "class EnvClient" in (data / "env_client.py").read_text()
    # ReAct's exemplars travel with the protocol, so that it can build the react prompt there
    assert (data / "react_prompts.json").read_bytes() == (
        task.workspace_files()["react_prompts.json"].read_bytes()
    )
    assert (data / "walkthroughs.jsonl").exists() and (data / "games").is_dir()
    desc = (paths.workspace / "description.md").read_text()
    assert "ENV_SERVER_URL" in desc and "at most 20 actions" in desc
    assert not any("private" in str(p) for p in data.rglob("*"))


def _alfworld_download_layout(root, prepared):
    """A copy of the lite games in the layout alfworld-download produces, plus a game
    alfworld must skip (unsolvable) and one of an unsupported task type."""
    jd = root / "json_2.1.1"
    for side, split in (
        ("public", "train"),
        ("validation", "valid_seen"),
        ("private", "valid_unseen"),
    ):
        shutil.copytree(getattr(prepared, side) / "games", jd / split)
    bad = jd / "train" / "pick_and_place_simple-Pen-None-Desk-1" / "trial_x"
    shutil.copytree(next((jd / "train").glob("*/*")), bad)
    data = json.loads((bad / "game.tw-pddl").read_text())
    (bad / "game.tw-pddl").write_text(json.dumps({**data, "solvable": False}))
    sliced = jd / "train" / "pick_and_place_simple-AppleSliced-None-Desk-1" / "trial_y"
    shutil.copytree(next((jd / "train").glob("*/*")), sliced)
    return jd


def test_official_data_import(tmp_path, alfworld_lite) -> None:
    from agent2rl.tasks import get_task, prepare_task

    _, prepared = alfworld_lite
    _alfworld_download_layout(tmp_path / "dl", prepared)
    home = tmp_path / "home"
    r = run_cli(
        ["data", "import", "alfworld", str(tmp_path / "dl")],
        env={**os.environ, "AGENT2RL_HOME": str(home)},
    )
    assert r.returncode == 0, r.stderr
    assert "6 train games (public), 6 valid_seen games (validation), 6 valid_unseen" in r.stdout
    root = home / "tasks" / "alfworld" / f"v{get_task('alfworld').version}"
    rows = [json.loads(x) for x in (root / "public" / "walkthroughs.jsonl").open()]
    assert len(rows) == 6 and all(r["won"] and r["steps"] for r in rows)
    assert len(list((root / "private" / "games").glob("*/*/game.tw-pddl"))) == 6
    assert len(list((root / "validation" / "games").glob("*/*/game.tw-pddl"))) == 6
    # prepare finds the imported data; its games are served, not copied into workspaces
    task = get_task("alfworld")
    assert "games" in task.workspace_exclude
    assert len(task.environment(prepare_task(task, home / "tasks"), "public").games) == 6


def test_official_data_missing_names_the_fix(tmp_path, monkeypatch) -> None:
    from agent2rl.tasks import get_task, prepare_task

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "empty"))
    with pytest.raises(UserError, match="alfworld-download.*agent2rl data import alfworld"):
        prepare_task(get_task("alfworld"), tmp_path / "store")
    assert not (tmp_path / "store" / "alfworld" / "v3" / "public").exists()
    r = run_cli(["data", "import", "alfworld", str(tmp_path)])
    assert r.returncode == 2 and "json_2.1.1/train" in r.stderr
