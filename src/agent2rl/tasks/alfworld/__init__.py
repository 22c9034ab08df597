"""``alfworld`` and ``alfworld-lite`` (level 3, interactive rollout): household tasks in
ALFWorld's text games.

::

    games.py          AlfworldGames / GameSession: the games of a split through alfworld's
                      AlfredTWEnv, as the rollout layer's GameSource / Episode
    protocol.py       the prompt and action protocols, react (the paper's) and transcript
                      (standard library only: it is copied into the workspace as
                      data/protocol.py)
    react_prompts.json  ReAct's ALFWorld exemplars (ReAct's prompts/alfworld_3prompts.json,
                      which the reference ships), read by protocol.py's react protocol
    generate_lite.py  alfworld-lite's offline game generator (ALFWorld's on-disk format)
    importer.py       the official data: find, download, import

The model plays each private game through the task-neutral episode solver, replying greedily,
until the game is won or ``max_steps`` actions are used. Score: the percentage of games won,
with a breakdown by task type (pick, look, clean, heat, cool, pick-two). The ``protocol``
option picks the prompt (protocol.py): ``react`` (the paper's) or ``transcript`` (agent2rl's,
sized to a small context).

- ``alfworld``: the official data (``$ALFWORLD_DATA/json_2.1.1``, fetched by
  ``alfworld-download``): public = the ``train`` games, validation = ``valid_seen``, private =
  ``valid_unseen`` (134 out-of-distribution games); 50 steps per game; ``react`` by default.
- ``alfworld-lite``: games generated offline in ALFWorld's format from fixed seeds: public,
  validation and private sets, disjoint, small rooms and short solutions; 20 steps per game;
  ``transcript`` by default (the react prompt does not fit the tiny model's context).

The agent gets the expert walkthroughs of the public games (``data/walkthroughs.jsonl``, with
every observation and admissible-action list along the way) and a rollout service over the
public games for online RL."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.dataset import PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic, write_jsonl
from agent2rl.rollout.app import describe_api
from agent2rl.rollout.env import GameSource
from agent2rl.scoring import EpisodeOutcome
from agent2rl.solvers.env_pool import ProcessGames
from agent2rl.tasks.alfworld import protocol
from agent2rl.tasks.alfworld.games import AlfworldGames
from agent2rl.tasks.alfworld.generate_lite import GENERATOR_VERSION, generate_lite_split
from agent2rl.tasks.alfworld.importer import download_alfworld, find_alfworld_json, import_alfworld
from agent2rl.tasks.alfworld.protocol import EpisodeFormat
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task
from agent2rl.tasks.shared.interactive import (
    InteractiveTask,
    batch_size_option,
    count_lines,
    env_batch_option,
)
from agent2rl.tasks.shared.store import building

#: the longest episode a rollout-service session may ask for
MAX_SESSION_STEPS = 500
#: the most worker processes a grading plays its games in
MAX_ENV_WORKERS = 4
#: the fewest games a grading plays in worker processes: starting them (each imports
#: TextWorld and loads the grammar) costs more than it saves on a few games. Measured with
#: `agent2rl eval` on the tiny model, idle 2-core VM: 6 games 20.2-21.6 s in 2 workers vs
#: 16.1-16.7 s in process; 48 games 44.6 s vs 48.1 s
#: (docs/figures/data/grading_latency_alfworld_lowload.json)
MIN_GAMES_FOR_WORKERS = 32
#: each protocol's reply length when the ``max_new_tokens`` option is 0 (the reference's 100
#: for react; agent2rl's 64 for transcript)
PROTOCOL_MAX_NEW_TOKENS = {"react": protocol.REACT_MAX_NEW_TOKENS, "transcript": 64}


# The tasks' options. Values sized for the tiny model are measured, as their comments say.
_PROTOCOL_HELP = (
    "The episode protocol: `react` is the paper's (the reference evaluator's ReAct prompt "
    "with two exemplars); `transcript` is agent2rl's (the last `history` steps, optionally "
    "the admissible actions, trimmed to `max_prompt_chars`)."
)
_HISTORY_HELP = "Earlier steps the `transcript` prompt shows (`react` shows them all)."
_ADMISSIBLE_HELP = "Whether the `transcript` prompt lists the admissible actions."
_PROMPT_CHARS_HELP = "The longest `transcript` prompt, in characters (older steps go first)."


@dataclass(frozen=True)
class AlfworldOptions(TaskOptions):
    """``alfworld``'s options: the paper's protocol by default."""

    protocol: str = option("react", _PROTOCOL_HELP, choices=protocol.PROTOCOLS)
    max_steps: int = option(50, "Actions per game before it ends unsolved.")
    history: int = option(10, _HISTORY_HELP)
    show_admissible: bool = option(True, _ADMISSIBLE_HELP)
    max_prompt_chars: int = option(6000, _PROMPT_CHARS_HELP)
    max_new_tokens: int = option(
        0,
        "The most new tokens per action; 0: the protocol's own "
        f"({', '.join(f'{k} {v}' for k, v in PROTOCOL_MAX_NEW_TOKENS.items())}).",
    )
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()


@dataclass(frozen=True)
class AlfworldLiteOptions(TaskOptions):
    """``alfworld-lite``'s options: sized for the tiny model's 512-token context."""

    # agent2rl's transcript protocol: the paper's react prompt does not fit the tiny
    # model's 512-token context (its two exemplars alone are 3,200-4,400 characters)
    protocol: str = option("transcript", _PROTOCOL_HELP, choices=protocol.PROTOCOLS)
    # 600 walkthroughs: on the validation games the tiny model won 19 of 48 after 900 SFT
    # steps on them, on 300 walkthroughs 15 of 48 (benchmarks/validation_defaults.py,
    # its data file as of commit 0121b14): validation keeps 600. Generating them
    # takes minutes, once.
    n_train: int = option(600, "Generated public games, each with the expert's walkthrough.")
    n_eval: int = option(48, "Generated graded games.")
    n_validation: int = option(48, "Generated validation games (never graded).")
    max_steps: int = option(20, "Actions per game before it ends unsolved.")
    # Prompts that fit the tiny model's 512-token context: the recent steps as in a
    # ReAct transcript, no action list (each floor plan's receptacles are a fixed set).
    history: int = option(6, _HISTORY_HELP)
    show_admissible: bool = option(False, _ADMISSIBLE_HELP)
    max_prompt_chars: int = option(470, _PROMPT_CHARS_HELP)
    max_new_tokens: int = option(40, "The most new tokens per action.")
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()


class AlfworldBase(InteractiveTask):
    """What both ALFWorld tasks share: the protocol, the environment, the workspace."""

    protocol_module = protocol
    config: AlfworldOptions | AlfworldLiteOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        #: a warm grader's worker pools, by split directory (see grading_games)
        self._kept_pools: dict[Path, ProcessGames] = {}

    def episode_format(self) -> EpisodeFormat:
        o = self.config
        return EpisodeFormat(
            max_steps=o.max_steps,
            history=o.history,
            max_prompt_chars=o.max_prompt_chars,
            max_new_tokens=o.max_new_tokens or PROTOCOL_MAX_NEW_TOKENS[o.protocol],
            show_admissible=o.show_admissible,
            protocol=o.protocol,
        )

    def environment(self, prepared: PreparedTask, split: Split) -> AlfworldGames:
        return AlfworldGames(
            prepared.split(split) / "games", self.config.max_steps, step_cap=MAX_SESSION_STEPS
        )

    def grading_games(self, prepared: PreparedTask, split: Split) -> GameSource:
        """The games in worker processes when this machine has more than one usable core and
        the split at least :data:`MIN_GAMES_FOR_WORKERS` games: TextWorld's engine is
        CPU-bound Python and not thread-safe (one engine call at a time per process), and
        loading a game (about 0.1 s) and stepping it are most of a trained model's lite
        grading. With :attr:`keep_environments` (a warm grader) a split's workers are kept for
        its next evaluation (:class:`ProcessGames` ``persistent``): starting two took 1.3 s
        here, and their TextWorld caches load a game they loaded before faster; :meth:`close`
        stops them."""
        root = prepared.split(split) / "games"
        if self.keep_environments and root in self._kept_pools:
            return self._kept_pools[root]
        games = self.environment(prepared, split)
        workers = min(MAX_ENV_WORKERS, len(os.sched_getaffinity(0)))
        if workers < 2 or len(games.games) < MIN_GAMES_FOR_WORKERS:
            return games
        factory = functools.partial(
            AlfworldGames, root, self.config.max_steps, step_cap=MAX_SESSION_STEPS
        )
        pool = ProcessGames(games, factory, workers, persistent=self.keep_environments)
        if self.keep_environments:
            self._kept_pools[root] = pool
        return pool

    def close(self) -> None:
        pools, self._kept_pools = list(self._kept_pools.values()), {}
        for pool in pools:
            pool.close()

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """One sample per game of ``split``, sorted by game id (the game's directory under
        ``games/``, as :class:`AlfworldGames` names it; every stored game is playable: the
        generator and the importer keep only those)."""
        root = prepared.split(split) / "games"
        ids = sorted(str(p.parent.relative_to(root)) for p in root.glob("*/*/game.tw-pddl"))
        return [Sample(i, {"game_id": i}) for i in ids[:limit]]

    def scorer(self, prepared: PreparedTask) -> EpisodeOutcome:
        return EpisodeOutcome("won")

    def workspace_files(self) -> dict[str, Path]:
        # the react protocol reads its exemplars from beside protocol.py
        prompts = Path(protocol.__file__).with_name(protocol.REACT_PROMPTS_FILE)
        return {**super().workspace_files(), protocol.REACT_PROMPTS_FILE: prompts}

    def description(self, prepared: PreparedTask) -> str:
        fmt = self.episode_format()
        rows = count_lines(prepared.public / "walkthroughs.jsonl")
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
  `group` (the task type), `goal`, and `steps`, a list of `{{"observation",
  "admissible_actions", "action"}}` as an expert played it (the first observation is the
  room's description), then `final_observation` and `won`.
- {games_note}.
- The {n_eval} evaluation games are never shown to you; the grading service plays your
  submissions on them.

## The rollout service (online RL)
{describe_api(fmt.max_steps, "1 on the winning step", "look")}
## How your model is evaluated
{protocol.describe(fmt)}
"""


def _is_stored(prepared: PreparedTask) -> bool:
    """Whether the splits are in the store: the public walkthroughs and the graded and
    validation games."""
    return (prepared.public / "walkthroughs.jsonl").exists() and all(
        (prepared.split(s) / "games").is_dir() for s in ("private", "validation")
    )


LITE_TRAIN_SEED = 1
LITE_EVAL_SEED = 2
LITE_VALIDATION_SEED = 3


@task
class AlfworldLite(AlfworldBase):
    name = "alfworld-lite"
    version = "2"
    summary = "ALFWorld-format household text games generated offline (CPU-sized)"
    eval_timeout_s = 1800.0
    Options = AlfworldLiteOptions
    config: AlfworldLiteOptions

    def prepare(self, root: Path) -> PreparedTask:
        n_train, n_eval, n_val = self.config.n_train, self.config.n_eval, self.config.n_validation
        if min(n_train, n_eval, n_val) < 1:
            raise UserError("alfworld-lite needs n_train, n_eval and n_validation >= 1")
        sets = root / f"g{GENERATOR_VERSION}-train{n_train}-eval{n_eval}-val{n_val}"
        prepared = PreparedTask(sets / "public", sets / "private", sets / "validation")
        if _is_stored(prepared):
            return prepared
        with building(sets) as tmp:
            _, eval_sigs = generate_lite_split(
                tmp / "private" / "games", LITE_EVAL_SEED, n_eval, set()
            )
            _, val_sigs = generate_lite_split(
                tmp / "validation" / "games", LITE_VALIDATION_SEED, n_val, eval_sigs
            )
            rows, _ = generate_lite_split(
                tmp / "public" / "games", LITE_TRAIN_SEED, n_train, eval_sigs | val_sigs
            )
            write_jsonl(tmp / "public" / "walkthroughs.jsonl", rows)
            write_json_atomic(
                tmp / "manifest.json",
                {"generator": GENERATOR_VERSION, "train": n_train, "eval": n_eval, "val": n_val},
            )
        return prepared

    def make_data(self, out: Path, n: int, seed: int) -> str:
        if n < 1:
            raise UserError(f"--n {n}: generate at least one game")
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out} is not empty: choose a new folder for the games")
        rows, _ = generate_lite_split(out / "games", seed, n, set())
        write_jsonl(out / "walkthroughs.jsonl", rows)
        return f"{n} games in {out / 'games'}, walkthroughs in {out / 'walkthroughs.jsonl'}"


@task
class Alfworld(AlfworldBase):
    name = "alfworld"
    # 3: the paper's react protocol became the default (2: transcript)
    version = "3"
    summary = "ALFWorld household text games (official data; valid_unseen graded)"
    workspace_exclude = ("games",)
    Options = AlfworldOptions
    config: AlfworldOptions

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if _is_stored(prepared):
            return prepared
        source = Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld")
        try:
            json_dir = find_alfworld_json(source)
        except UserError:
            json_dir = download_alfworld(source)
        import_alfworld(json_dir, root)
        return prepared

    def import_data(self, source: Path, root: Path) -> str:
        return import_alfworld(source, root)
