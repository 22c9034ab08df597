"""The official ALFWorld data: found on disk, downloaded with ``alfworld-download``, or
imported from a folder (``agent2rl data import alfworld DIR``) into the task store.

Splits: ``train`` is public, ``valid_seen`` the harness's validation split (never graded,
never shown), ``valid_unseen`` (134 out-of-distribution games) the graded private split, as
in the paper. The public games' walkthroughs are replayed to record what each step shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.tasks.alfworld.games import AlfworldGames, game_path
from agent2rl.tasks.alfworld.generate_lite import map_in_workers, replay_walkthrough, run_expert
from agent2rl.tasks.shared.store import building

#: our split -> ALFWorld's folder
ALFWORLD_SPLITS = {"public": "train", "validation": "valid_seen", "private": "valid_unseen"}
GAME_FILES = ("traj_data.json", "initial_state.pddl", "game.tw-pddl")


def find_alfworld_json(source: Path) -> Path:
    """The directory under ``source`` (itself included) that holds ALFWorld's ``train``,
    ``valid_seen`` and ``valid_unseen`` splits (``json_2.1.1`` in a download);
    :class:`UserError` if none does."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise UserError(f"{source} is not a directory: pass the folder holding json_2.1.1")
    for d in [source, *sorted(p for p in source.rglob("*") if p.is_dir())]:
        if all((d / split).is_dir() for split in ALFWORLD_SPLITS.values()):
            return d
    raise UserError(
        f"no ALFWorld data under {source}: expected json_2.1.1/train, json_2.1.1/valid_seen "
        "and json_2.1.1/valid_unseen (run alfworld-download where the network allows)"
    )


def _replay_one(args: tuple[Path, str, str]) -> dict[str, Any] | None:
    """The walkthrough row of one game (its file, id and task type): its stored walkthrough
    replayed (or alfworld's expert run when it has none); None when it cannot be played."""
    game_file, game_id, task_type = args
    steps = json.loads(game_file.read_text()).get("walkthrough")
    run = replay_walkthrough(game_file, steps) if steps else None
    if run is None:
        run = run_expert(game_file, seed=0, max_steps=200)
    return run.walkthrough_row(game_id, task_type) if run is not None else None


def import_alfworld(source: Path, root: Path) -> str:
    """Copy ALFWorld's three splits from ``source`` into the store ``root`` and write the
    public walkthroughs with their observations. Only playable games (those alfworld's
    ``AlfredTWEnv`` collects) are kept. The new tree is built beside the old one and swapped
    in, so a failed import loses nothing."""
    json_dir = find_alfworld_json(source)
    with building(root) as tmp:
        counts = {}
        for side, split in ALFWORLD_SPLITS.items():
            try:
                games = AlfworldGames(json_dir / split, max_steps=50).games
            except ValueError as err:
                raise UserError(f"{json_dir / split}: {err}") from None
            for g in games:
                dest = tmp / side / "games" / g.game_id
                dest.mkdir(parents=True)
                for name in GAME_FILES:
                    if (game_path(g).parent / name).exists():
                        shutil.copyfile(game_path(g).parent / name, dest / name)
            counts[side] = len(games)
        public_games = AlfworldGames(tmp / "public" / "games", max_steps=50).games
        jobs = [(game_path(g), g.game_id, g.group) for g in public_games]
        rows = map_in_workers(_replay_one, jobs, chunksize=8)
        write_jsonl(tmp / "public" / "walkthroughs.jsonl", [r for r in rows if r is not None])
        write_json_atomic(
            tmp / "manifest.json",
            {"source": str(json_dir), **counts, "walkthroughs": sum(r is not None for r in rows)},
        )
    return (
        f"alfworld: {counts['public']} train games (public), {counts['validation']} valid_seen "
        f"games (validation), {counts['private']} valid_unseen games (graded) from {json_dir}"
    )


def download_alfworld(data: Path) -> Path:
    """Run ``alfworld-download`` into ``data`` (``$ALFWORLD_DATA``) unless offline, and return
    its ``json_2.1.1``; a :class:`UserError` naming the alternatives when the data still is
    not there."""
    fix = (
        f"ALFWorld's data is not in {data} (json_2.1.1/train, valid_seen and valid_unseen). "
        "Run alfworld-download where GitHub is reachable (set ALFWORLD_DATA to choose where), "
        "or copy json_2.1.1 here and run: agent2rl data import alfworld DIR"
    )
    if os.environ.get("AGENT2RL_OFFLINE") or not shutil.which("alfworld-download"):
        raise UserError(fix)
    proc = subprocess.run(
        ["alfworld-download"],
        env={**os.environ, "ALFWORLD_DATA": str(data)},
        capture_output=True,
        text=True,
    )
    try:
        return find_alfworld_json(data)
    except UserError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"{fix} (alfworld-download: {tail[0][:200]})") from None
