"""The lite game generator and the ALFWorld engine path: generated games load through
alfworld's own AlfredTWEnv, every walkthrough wins there, generation is deterministic and the
eval games never repeat a train game."""

from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent2rl.files import read_jsonl
from agent2rl.tasks.alfworld.games import AlfworldGames, game_path
from agent2rl.tasks.alfworld.generate_lite import TASK_TYPES, generate_game
from agent2rl.tasks.alfworld.protocol import split_intro


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def test_generated_split_loads_in_alfredtwenv_with_every_task_type(alfworld_lite) -> None:
    _, prepared = alfworld_lite
    for split in (prepared.public, prepared.private):
        games = AlfworldGames(split / "games", max_steps=20)
        assert len(games.games) == 6
        assert {g.group for g in games.games} == set(TASK_TYPES)
        for g in games.games:
            data = json.loads(game_path(g).read_text())
            assert data["solvable"] is True and data["walkthrough"]
            assert (game_path(g).parent / "initial_state.pddl").read_text().startswith("(define")
            traj = json.loads((game_path(g).parent / "traj_data.json").read_text())
            assert traj["task_type"] == g.group


def test_every_walkthrough_wins_through_the_official_env(alfworld_lite) -> None:
    task, prepared = alfworld_lite
    for split in (prepared.public, prepared.private):
        # within the task's own step limit: every game can be won as graded
        games = AlfworldGames(split / "games", max_steps=task.opts["max_steps"])
        for g in games.games:
            walkthrough = json.loads(game_path(g).read_text())["walkthrough"]
            session = games.open(g)
            try:
                assert not session.won
                for action in walkthrough:
                    assert action in session.last.admissible_actions, (g.game_id, action)
                    result = session.step(action)
                assert result.won and result.done and result.reward == 1.0, g.game_id
                assert result.steps == len(walkthrough)
            finally:
                session.close()


def test_walkthrough_rows_match_what_the_game_shows(alfworld_lite) -> None:
    _, prepared = alfworld_lite
    rows = read_jsonl(prepared.public / "walkthroughs.jsonl")
    games = AlfworldGames(prepared.public / "games", max_steps=30)
    assert sorted(r["game_id"] for r in rows) == [g.game_id for g in games.games]
    row = rows[0]
    session = games.open(games.by_id[row["game_id"]])
    try:
        assert session.goal == row["goal"]
        for st in row["steps"]:
            assert st["observation"] == session.last.observation
            assert st["admissible_actions"] == session.last.admissible_actions
            session.step(st["action"])
        assert session.last.observation == row["final_observation"] and row["won"]
    finally:
        session.close()


def test_generation_is_deterministic(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        root.mkdir()
        games = [generate_game(root, seed=11, index=i, exclude=set()) for i in (0, 3)]
    assert _tree_hash(a) == _tree_hash(b)
    assert [g.task_type for g in games] == [TASK_TYPES[0], TASK_TYPES[3]]
    room, goal = split_intro(games[0].expert.observations[0])
    assert room.startswith("You are in the middle of a room") and goal == games[0].goal


def test_excluded_games_are_redrawn(tmp_path) -> None:
    first = generate_game(tmp_path / "x", seed=5, index=0, exclude=set())
    again = generate_game(tmp_path / "y", seed=5, index=0, exclude={first.signature})
    assert again.signature != first.signature


def test_train_and_eval_splits_are_disjoint(alfworld_lite) -> None:
    _, prepared = alfworld_lite

    def signatures(root: Path) -> list[str]:
        return [
            json.loads(f.read_text())["agent2rl"]["signature"]
            for f in root.glob("*/*/traj_data.json")
        ]

    train, evals = signatures(prepared.public / "games"), signatures(prepared.private / "games")
    assert len(train) == len(evals) == 6
    assert not set(train) & set(evals)


@pytest.mark.parametrize("bad", [{"n_train": "0"}, {"n_eval": "-1"}, {"n_validation": "0"}])
def test_bad_sizes_are_refused(bad) -> None:
    from agent2rl.errors import UserError
    from agent2rl.settings import load_settings
    from agent2rl.tasks import get_task, prepare_task

    task = get_task("alfworld-lite", bad)
    with pytest.raises(UserError, match="n_train, n_eval and n_validation >= 1"):
        prepare_task(task, load_settings().task_store)


def test_sessions_played_from_many_threads_each_play_their_own_game(alfworld_lite) -> None:
    """The rollout service plays sessions from a thread pool: loading and stepping games at
    once must neither crash TextWorld's shared parsers nor swap the games."""
    task, prepared = alfworld_lite
    games = AlfworldGames(prepared.public / "games", max_steps=task.opts["max_steps"])
    walks = {w["game_id"]: w for w in read_jsonl(prepared.public / "walkthroughs.jsonl")}
    barrier = threading.Barrier(len(games.games))

    def play(g) -> tuple[str, bool]:
        barrier.wait()  # every thread loads its game at the same moment
        session = games.open(g)
        try:
            for step in walks[g.game_id]["steps"]:
                session.step(step["action"])
            return session.goal, session.won
        finally:
            session.close()

    for _ in range(2):
        with ThreadPoolExecutor(len(games.games)) as pool:
            results = list(pool.map(play, games.games))
        for g, (goal, won) in zip(games.games, results, strict=True):
            assert goal == walks[g.game_id]["goal"] and won, g.game_id


def test_cached_textworld_parses_play_the_same_games(alfworld_lite, monkeypatch) -> None:
    """TextWorld's grammar and logic strings parsed, and each game's PDDL translated, once
    per process (a speed fix) write the very same observations and admissible actions as
    doing it at every call: every game of the split played through its walkthrough with
    detours (unknown objects, repeated looks) both ways."""
    import fast_downward
    import textworld.logic
    from textworld.envs.pddl import textgen

    _, prepared = alfworld_lite
    games = AlfworldGames(prepared.private / "games", max_steps=60)  # installs the caches
    modules = (textgen, textworld.logic)
    cached = [m._parse_and_convert for m in modules]
    translate = fast_downward.pddl2sas
    assert hasattr(translate, "cache_info")
    assert all(hasattr(c, "cache_info") for c in cached)

    def play() -> list[tuple]:
        seen = []
        for g in games.games:
            walkthrough = json.loads(game_path(g).read_text())["walkthrough"]
            session = games.open(g)
            try:
                seen.append((session.goal, session.last.observation))
                for action in ["look", "go to desk 99", "inventory", *walkthrough]:
                    r = session.step(action)
                    seen.append((r.observation, tuple(r.admissible_actions), r.won, r.reward))
            finally:
                session.close()
        return seen

    with_cache = play()
    assert all(c.cache_info().hits > 0 for c in [*cached, translate])
    for m, c in zip(modules, cached, strict=True):
        monkeypatch.setattr(m, "_parse_and_convert", c.uncached)
    monkeypatch.setattr(fast_downward, "pddl2sas", translate.uncached)
    assert play() == with_cache
    assert sum(row[2] for row in with_cache if len(row) == 4) == len(games.games)  # all won
