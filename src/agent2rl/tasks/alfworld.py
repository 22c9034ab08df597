"""``alfworld`` and ``alfworld-lite`` (level 3, interactive rollout): household tasks in
ALFWorld's text games.

The model plays each private game through alfworld's engine: at every step the grader builds
the prompt of :mod:`agent2rl.envs.alfworld_protocol` (task, recent steps, observation,
admissible actions), generates greedily and plays the parsed action, until the game is won or
``max_steps`` actions are used. Score: the percentage of games won, with a breakdown by task
type (pick, look, clean, heat, cool, pick-two). Episodes run in parallel slots, one model
call per step over every unfinished game.

- ``alfworld``: the official data (``$ALFWORLD_DATA/json_2.1.1``, fetched by
  ``alfworld-download``): public = the ``train`` games, private = ``valid_unseen`` (134
  out-of-distribution games); 50 steps per game.
- ``alfworld-lite``: games generated offline in ALFWorld's format
  (:mod:`agent2rl.envs.alfworld_lite`) from fixed seeds: a public train set and a private
  eval set, small rooms and short solutions; 20 steps per game.

The agent gets the expert walkthroughs of the public games (``data/walkthroughs.jsonl``, with
every observation and admissible-action list along the way) and a rollout service over the
public games for online RL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from agent2rl.envs import alfworld_protocol
from agent2rl.envs import client as env_client
from agent2rl.envs.alfworld import AlfworldGames, GameInfo
from agent2rl.envs.alfworld_protocol import (
    EpisodeFormat,
    build_chat_message,
    build_prompt,
    parse_action,
    split_intro,
)
from agent2rl.errors import UserError
from agent2rl.inference.backend import Backend, GenerationSettings
from agent2rl.rundir import swap_in_dir, write_json_atomic
from agent2rl.tasks.base import EvalResult, ItemResult, PreparedTask, Task
from agent2rl.tasks.prompt_format import is_chat, write_jsonl

#: the longest episode a rollout-service session may ask for
MAX_SESSION_STEPS = 500


def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class AlfworldBase(Task):
    """What both ALFWorld tasks share: the protocol, evaluation, rollout source, workspace."""

    level = 3
    interactive = True
    eval_timeout_s = 3600.0

    def episode_format(self) -> EpisodeFormat:
        o = self.opts
        return EpisodeFormat(
            max_steps=o["max_steps"],
            history=o["history"],
            max_prompt_chars=o["max_prompt_chars"],
            max_new_tokens=o["max_new_tokens"],
            show_admissible=o["show_admissible"],
        )

    def prompt_format(self, prepared: PreparedTask) -> EpisodeFormat:
        return self.episode_format()

    def eval_settings(self) -> dict[str, Any]:
        return {**super().eval_settings(), "protocol": self.episode_format().to_dict()}

    def workspace_files(self) -> dict[str, Path]:
        return {
            "alfworld_protocol.py": Path(alfworld_protocol.__file__),
            "env_client.py": Path(env_client.__file__),
        }

    def rollout_source(self, prepared: PreparedTask) -> AlfworldGames:
        return AlfworldGames(
            prepared.public / "games", self.opts["max_steps"], step_cap=MAX_SESSION_STEPS
        )

    def evaluate(
        self, backend: Backend, prepared: PreparedTask, limit: int | None = None
    ) -> EvalResult:
        started = time.time()
        fmt = self.episode_format()
        games = AlfworldGames(prepared.private / "games", fmt.max_steps)
        selected = games.games[:limit] if limit else games.games
        episodes = play_episodes(
            backend, games, selected, fmt, self.opts["env_batch"], self.opts["batch_size"]
        )
        items = [
            ItemResult(
                id=ep["game_id"],
                prediction=" | ".join(ep["actions"]),
                target=ep["goal"],
                correct=ep["won"],
                score=1.0 if ep["won"] else 0.0,
                meta={"group": ep["task_type"], "steps": len(ep["actions"])},
            )
            for ep in episodes
        ]
        won = Counter(ep["task_type"] for ep in episodes if ep["won"])
        total = Counter(ep["task_type"] for ep in episodes)
        details = {
            "by_task_type": {
                t: {"games": n, "won": won[t], "success": 100.0 * won[t] / n}
                for t, n in sorted(total.items())
            },
            "mean_steps": sum(len(ep["actions"]) for ep in episodes) / max(1, len(episodes)),
        }
        return EvalResult.from_items(items, seconds=time.time() - started, details=details)

    def description(self, prepared: PreparedTask) -> str:
        fmt = self.episode_format()
        rows = _count_lines(prepared.public / "walkthroughs.jsonl")
        n_eval = len(list((prepared.private / "games").glob("*/*/game.tw-pddl")))
        games_note = (
            "the game files are not copied into the workspace; play them through the rollout "
            "service"
            if "games" in self.workspace_exclude
            else "`data/games/`: the same games in ALFWorld's on-disk format (`traj_data.json`,"
            " `initial_state.pddl`, `game.tw-pddl`), loadable with the `alfworld` package"
        )
        return f"""# Task: {self.name} (level 3, interactive rollout)

{self.summary}. Improve the base model's success rate: it plays text games where it must
carry out household tasks (pick and place, look at an object under a lamp, clean, heat or cool
an object and put it somewhere, put two objects somewhere) by typing actions.

## Data
- `data/walkthroughs.jsonl`: one line per public training game ({rows} games): `game_id`,
  `task_type`, `goal`, and `steps`, a list of `{{"observation", "admissible_actions",
  "action"}}` as an expert played it (the first observation is the room's description), then
  `final_observation` and `won`.
- {games_note}.
- The {n_eval} evaluation games are never shown to you; the grading service plays your
  submissions on them.

## The rollout service (online RL)
A service over the public training games runs for you at `$ENV_SERVER_URL` (token
`$ENV_TOKEN`, header `Authorization: Bearer $ENV_TOKEN`). `data/env_client.py` wraps it:

```python
import os, sys; sys.path.insert(0, os.environ["DATA_PATH"])
from env_client import EnvClient
env = EnvClient()
with env.session(seed=0) as s:          # or game_id=...; a random public game otherwise
    while not s.done:
        s.step(s.admissible_actions[0])  # s.observation, s.reward, s.won, s.steps, s.goal
```

- `GET /games`: the public game ids and task types.
- `POST /sessions` with `{{"game_id"?, "seed"?, "max_steps"?}}`: a new episode (default
  {fmt.max_steps} steps): `session_id`, `goal`, `observation`, `admissible_actions`.
- `POST /sessions/<id>/step` with `{{"action": "..."}}`: `observation`, `reward` (1 on the
  winning step), `done`, `won`, `steps`, `admissible_actions`. An action the game does not
  admit answers "Nothing happens." and uses a step, as in evaluation.
- `DELETE /sessions/<id>` ends a session. At most a few dozen sessions may be open at once
  and steps are rate-limited (HTTP 429 with `Retry-After`; the client retries).
- Every episode and step is recorded for the run's report.

## How your model is evaluated
{alfworld_protocol.describe(fmt)}
"""


def _count_lines(path: Path) -> int:
    with open(path) as fh:
        return sum(1 for _ in fh)


def play_episodes(
    backend: Backend,
    games: AlfworldGames,
    selected: list[GameInfo],
    fmt: EpisodeFormat,
    env_batch: int,
    batch_size: int,
) -> list[dict[str, Any]]:
    """Play every game of ``selected`` once with ``backend``'s greedy policy; one record
    (``game_id``, ``task_type``, ``goal``, ``actions``, ``won``) per game, in ``selected``'s
    order. Up to ``env_batch`` games run side by side, and each step is one ``generate`` call
    over the unfinished ones. Deterministic for a given model and backend."""
    chat = is_chat(backend)
    settings = GenerationSettings(
        max_new_tokens=fmt.max_new_tokens, stop=fmt.stop, batch_size=batch_size
    )
    by_path = {str(g.path): g for g in selected}
    records: dict[str, dict[str, Any]] = {}
    for start in range(0, len(selected), env_batch):
        chunk = selected[start : start + env_batch]
        env = games.batch_env(chunk)
        try:
            obs, infos = env.reset()
            slots = []
            for text, gamefile, admissible in zip(
                obs, infos["extra.gamefile"], infos["admissible_commands"], strict=True
            ):
                room, goal = split_intro(text)
                game = by_path[str(gamefile)]
                slots.append(
                    {
                        "game_id": game.game_id,
                        "task_type": game.task_type,
                        "goal": goal,
                        "observation": room,
                        "admissible": admissible,
                        "steps": [],
                        "won": False,
                        "done": False,
                    }
                )
            for _ in range(fmt.max_steps):
                active = [s for s in slots if not s["done"]]
                if not active:
                    break
                build = build_chat_message if chat else build_prompt
                texts = [
                    build(s["goal"], s["steps"], s["observation"], s["admissible"], fmt)
                    for s in active
                ]
                if chat:
                    texts = [backend.chat_prompt([{"role": "user", "content": t}]) for t in texts]
                replies = backend.generate(texts, settings)
                # Finished games still need a command in the batch; TextWorld ignores it.
                actions = ["look"] * len(slots)
                for s, reply in zip(active, replies, strict=True):
                    actions[slots.index(s)] = parse_action(reply)
                obs, _scores, dones, infos = env.step(actions)
                for i, s in enumerate(slots):
                    if s["done"]:
                        continue
                    s["steps"].append((s["observation"], actions[i]))
                    s["observation"], s["admissible"] = obs[i], infos["admissible_commands"][i]
                    s["won"] = bool(infos["won"][i])
                    s["done"] = bool(dones[i]) or s["won"] or len(s["steps"]) >= fmt.max_steps
        finally:
            env.close()
        for s in slots:
            records[s["game_id"]] = {
                "game_id": s["game_id"],
                "task_type": s["task_type"],
                "goal": s["goal"],
                "actions": [a for _, a in s["steps"]],
                "won": s["won"],
            }
    return [records[g.game_id] for g in selected]


def walkthrough_row(
    game_id: str,
    task_type: str,
    observations: list[str],
    admissible: list[list[str]],
    actions: list[str],
    won: bool,
) -> dict[str, Any]:
    """One line of ``walkthroughs.jsonl`` from an expert's play (``observations[0]`` is the
    game's intro, ``observations[i + 1]`` follows ``actions[i]``)."""
    room, goal = split_intro(observations[0])
    shown = [room, *observations[1:]]
    return {
        "game_id": game_id,
        "task_type": task_type,
        "goal": goal,
        "steps": [
            {"observation": o, "admissible_actions": list(adm), "action": a}
            for o, adm, a in zip(shown, admissible, actions, strict=False)
        ],
        "final_observation": shown[len(actions)] if len(shown) > len(actions) else "",
        "won": bool(won),
    }


# -- alfworld-lite ------------------------------------------------------------------------------
LITE_TRAIN_SEED = 1
LITE_EVAL_SEED = 2


def _lite_one(args: tuple[str, int, int, frozenset[str]]) -> dict[str, Any]:
    from agent2rl.envs.alfworld_lite import generate_game

    root, seed, index, exclude = args
    g = generate_game(Path(root), seed, index, set(exclude))
    e = g.expert
    return {
        "signature": g.signature,
        "row": walkthrough_row(
            g.game_id, g.task_type, e.observations, e.admissible, e.actions, e.won
        ),
    }


def generate_lite_split(
    root: Path, seed: int, n: int, exclude: set[str], workers: int | None = None
) -> tuple[list[dict[str, Any]], set[str]]:
    """``n`` games from ``seed`` into ``root`` (in worker processes; the result does not
    depend on how many). Returns their walkthrough rows (by index) and signatures."""
    root.mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), seed, i, frozenset(exclude)) for i in range(n)]
    workers = workers or _workers()
    if workers > 1 and n > 1:
        with ProcessPoolExecutor(max_workers=min(workers, n)) as pool:
            done = list(pool.map(_lite_one, jobs, chunksize=4))
    else:
        done = [_lite_one(j) for j in jobs]
    return [d["row"] for d in done], {d["signature"] for d in done}


class AlfworldLite(AlfworldBase):
    name = "alfworld-lite"
    version = "1"
    summary = "ALFWorld-format household text games generated offline (CPU-sized)"
    eval_timeout_s = 1800.0
    options: ClassVar[dict[str, Any]] = {
        # 600 walkthroughs: the tiny model won 5 of 48 after 900 SFT steps on them, 3 after
        # 900 on 300 (benchmarks/alfworld_sft.py). Generating them takes minutes, once.
        "n_train": 600,
        "n_eval": 48,
        "max_steps": 20,
        # Prompts that fit the tiny model's 512-token context: the recent steps as in a
        # ReAct transcript, no action list (each floor plan's receptacles are a fixed set).
        "history": 6,
        "show_admissible": False,
        "max_prompt_chars": 470,
        "max_new_tokens": 40,
        "env_batch": 16,
        "batch_size": 64,
    }

    def prepare(self, root: Path) -> PreparedTask:
        from agent2rl.envs.alfworld_lite import GENERATOR_VERSION

        n_train, n_eval = self.opts["n_train"], self.opts["n_eval"]
        if n_train < 1 or n_eval < 1:
            raise UserError("alfworld-lite needs n_train >= 1 and n_eval >= 1")
        sets = root / f"g{GENERATOR_VERSION}-train{n_train}-eval{n_eval}"
        public, private = sets / "public", sets / "private"
        if (public / "walkthroughs.jsonl").exists() and (private / "games").is_dir():
            return PreparedTask(public, private)
        sets.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{sets.name}.", dir=sets.parent))
        try:
            _, eval_sigs = generate_lite_split(
                tmp / "private" / "games", LITE_EVAL_SEED, n_eval, set()
            )
            rows, _ = generate_lite_split(
                tmp / "public" / "games", LITE_TRAIN_SEED, n_train, eval_sigs
            )
            write_jsonl(tmp / "public" / "walkthroughs.jsonl", rows)
            write_json_atomic(
                tmp / "manifest.json",
                {"generator": GENERATOR_VERSION, "train": n_train, "eval": n_eval},
            )
            swap_in_dir(tmp, sets)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return PreparedTask(public, private)


# -- alfworld (official data) -------------------------------------------------------------------
ALFWORLD_SPLITS = {"public": "train", "private": "valid_unseen"}


def find_alfworld_json(source: Path) -> Path:
    """The directory under ``source`` (itself included) that holds ALFWorld's ``train`` and
    ``valid_unseen`` splits (``json_2.1.1`` in a download); :class:`UserError` if none does."""
    source = Path(source).expanduser()
    if not source.is_dir():
        raise UserError(f"{source} is not a directory: pass the folder holding json_2.1.1")
    candidates = [source, *sorted(p for p in source.rglob("*") if p.is_dir())]
    for d in candidates:
        if all((d / split).is_dir() for split in ALFWORLD_SPLITS.values()):
            return d
    raise UserError(
        f"no ALFWorld data under {source}: expected json_2.1.1/train and "
        "json_2.1.1/valid_unseen (run alfworld-download where the network allows)"
    )


def _replay_one(args: tuple[str, str]) -> dict[str, Any] | None:
    """The walkthrough row of one game: its stored walkthrough replayed (or alfworld's expert
    run when it has none); None when the game cannot be played."""
    from agent2rl.envs.alfworld_lite import replay_walkthrough, run_expert

    game_file, game_id = args
    data = json.loads(Path(game_file).read_text())
    task_type = json.loads((Path(game_file).parent / "traj_data.json").read_text())["task_type"]
    steps = data.get("walkthrough")
    run = replay_walkthrough(Path(game_file), steps) if steps else None
    if run is None:
        run = run_expert(Path(game_file), seed=0, max_steps=200)
    if run is None:
        return None
    return walkthrough_row(
        game_id, task_type, run.observations, run.admissible, run.actions, run.won
    )


def import_alfworld(source: Path, root: Path, workers: int | None = None) -> str:
    """Copy ALFWorld's ``train`` (public) and ``valid_unseen`` (private) games from ``source``
    into the store ``root`` and write the public walkthroughs with their observations.

    Only playable games (those alfworld's ``AlfredTWEnv`` collects) are kept. The new tree
    is built beside the old one and swapped in, so a failed import loses nothing.
    """
    json_dir = find_alfworld_json(source)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        counts = {}
        for side, split in ALFWORLD_SPLITS.items():
            try:
                games = AlfworldGames(json_dir / split, max_steps=50).games
            except ValueError as err:
                raise UserError(f"{json_dir / split}: {err}") from None
            for g in games:
                dest = tmp / side / "games" / g.game_id
                dest.mkdir(parents=True)
                for name in ("traj_data.json", "initial_state.pddl", "game.tw-pddl"):
                    if (g.path.parent / name).exists():
                        shutil.copyfile(g.path.parent / name, dest / name)
            counts[side] = len(games)
        public_games = AlfworldGames(tmp / "public" / "games", max_steps=50).games
        jobs = [(str(g.path), g.game_id) for g in public_games]
        workers = workers or _workers()
        if workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                rows = list(pool.map(_replay_one, jobs, chunksize=8))
        else:
            rows = [_replay_one(j) for j in jobs]
        write_jsonl(tmp / "public" / "walkthroughs.jsonl", [r for r in rows if r is not None])
        write_json_atomic(
            tmp / "manifest.json",
            {"source": str(json_dir), **counts, "walkthroughs": sum(r is not None for r in rows)},
        )
        swap_in_dir(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (
        f"alfworld: {counts['public']} train games (public), {counts['private']} valid_unseen "
        f"games (graded) from {json_dir}"
    )


class Alfworld(AlfworldBase):
    name = "alfworld"
    version = "1"
    summary = "ALFWorld household text games (official data; valid_unseen graded)"
    workspace_exclude = ("games",)
    options: ClassVar[dict[str, Any]] = {
        "max_steps": 50,
        "history": 10,
        "show_admissible": True,
        "max_prompt_chars": 6000,
        "max_new_tokens": 64,
        "env_batch": 16,
        "batch_size": 64,
    }

    def prepare(self, root: Path) -> PreparedTask:
        public, private = root / "public", root / "private"
        if (public / "walkthroughs.jsonl").exists() and (private / "games").is_dir():
            return PreparedTask(public, private)
        source = Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld")
        try:
            json_dir = find_alfworld_json(source)
        except UserError:
            json_dir = _download_alfworld(source)
        import_alfworld(json_dir, root)
        return PreparedTask(public, private)

    def import_data(self, source: Path, root: Path) -> str:
        return import_alfworld(source, root)


def _download_alfworld(data: Path) -> Path:
    """Run ``alfworld-download`` into ``data`` (``$ALFWORLD_DATA``) unless offline; a
    :class:`UserError` naming the alternatives when the data still is not there."""
    fix = (
        f"ALFWorld's data is not in {data} (json_2.1.1/train and valid_unseen). Run "
        "alfworld-download where GitHub is reachable (set ALFWORLD_DATA to choose where), or "
        "copy json_2.1.1 here and run: agent2rl data import alfworld DIR"
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
