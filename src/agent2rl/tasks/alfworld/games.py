"""ALFWorld games through alfworld's own ``AlfredTWEnv``: the task's
:class:`~agent2rl.rollout.env.GameSource`.

Full ALFWorld and the generated lite games share this code path: the game list comes from
``AlfredTWEnv.collect_game_files`` (which keeps the solvable games of the six task types) and
every environment from ``AlfredTWEnv.init_env`` (alfworld's wrappers: the entity-name
demangler and the game-file info, plus TextWorld's step limit). Only the choice of games per
environment is ours: we set ``AlfredTWEnv.game_files`` before ``init_env`` so that an episode
plays the game it asked for. The grader's episode solver and the rollout service both open
episodes through :meth:`AlfworldGames.open`."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent2rl.rollout.env import GameInfo, StepResult
from agent2rl.tasks.alfworld.protocol import split_intro

#: One engine call at a time in a process. TextWorld's PDDL engine parses with module-global
#: tatsu parsers (``textworld.envs.pddl.logic._PARSER`` when a game loads,
#: ``...textgen._PARSER`` at every step's text), which are not thread-safe: two rollout
#: service sessions loading or stepping at once raised ``IndexError: pop from empty list``
#: (a 500). And ``engine`` picks the game through the shared ``AlfredTWEnv.game_files``. The
#: engine is CPU-bound Python, so the lock costs no parallelism the GIL would have allowed.
_ENGINE_LOCK = threading.RLock()


def cache_textworld_parses() -> None:
    """Make TextWorld parse each grammar and logic string, and translate each game's PDDL,
    once per process.

    Every observation TextWorld writes parses its template with tatsu
    (``textgen._parse_and_convert``, in ``ContextSensitiveGrammar.derive``), and the rules
    that pick a template parse their conditions the same way
    (``textworld.logic._parse_and_convert``), as does loading a game: the same few hundred
    strings, parsed again at every step, most of an ALFWorld step's and half of a game load's
    CPU time here (``benchmarks/grading_latency.py``). Each parse is a pure function of its
    arguments; some callers mutate the result (each grammar symbol gets its context), so each
    call gets a deep copy of the cached parse.

    ``fast_downward.pddl2sas`` (a parse, then the translation to SAS) builds a game's state
    twice (plain and optimised for replanning) when the game loads and again when it resets:
    four translations of two inputs per episode, most of an episode's start. It is a pure
    function of its text arguments (its options are set at every call), cached the same way:
    an episode translates each input once, a game opened again in the same process (a warm
    grader's workers) not at all.

    Idempotent; the games played are the same (``tests/unit/tasks/test_alfworld_lite.py``
    plays walkthroughs both ways)."""
    import fast_downward
    import textworld.logic
    from textworld.envs.pddl import textgen

    for module in (textgen, textworld.logic):
        if hasattr(module._parse_and_convert, "cache_info"):
            continue
        module._parse_and_convert = _cached_parse(module._parse_and_convert)
    # TextWorld calls it as fast_downward.pddl2sas, looked up at every call
    if not hasattr(fast_downward.pddl2sas, "cache_info"):
        fast_downward.pddl2sas = _cached_parse(fast_downward.pddl2sas, maxsize=512)


def _cached_parse(parse: Any, maxsize: int = 16384) -> Any:
    """``parse`` with its results cached by argument (the ``maxsize`` latest), each call
    handed a deep copy; the original stays reachable as ``.uncached``."""
    cache = functools.lru_cache(maxsize=maxsize)(parse)

    def cached(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(cache(*args, **kwargs))

    cached.cache_info = cache.cache_info  # type: ignore[attr-defined]
    cached.uncached = parse  # type: ignore[attr-defined]
    return cached


def alfworld_config(data_path: Path, max_steps: int) -> dict[str, Any]:
    """The part of alfworld's ``base_config.yaml`` that ``AlfredTWEnv`` reads, pointed at
    ``data_path`` (every split key: we pick games ourselves) with ``max_steps`` per episode.
    Training method ``dqn`` keeps alfworld's expert wrapper out of played games."""
    root = str(data_path)
    return {
        "dataset": {
            "data_path": root,
            "eval_id_data_path": root,
            "eval_ood_data_path": root,
            "num_train_games": -1,
            "num_eval_games": -1,
        },
        "env": {
            "type": "AlfredTWEnv",
            "goal_desc_human_anns_prob": 0,
            # alfworld's ids of its six task types (pick_and_place_simple ... pick_two_obj)
            "task_types": [1, 2, 3, 4, 5, 6],
            "domain_randomization": False,
            "expert_type": "handcoded",
        },
        "general": {"training_method": "dqn"},
        "rl": {"training": {"max_nb_steps_per_episode": max_steps}},
    }


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """alfworld prints progress bars and counts to stdout; the grader's stdout is a log."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def game_path(game: GameInfo) -> Path:
    """The ``game.tw-pddl`` file of an ALFWorld game."""
    return Path(game.meta["path"])


class AlfworldGames:
    """The games under one split root, loaded through ``AlfredTWEnv``. A game's ``game_id`` is
    its directory relative to the split root
    (``<task>-<Obj>-<MRecep>-<Parent>-<scene>/trial_<...>``), its ``group`` its task type and
    ``meta["path"]`` its ``game.tw-pddl``. ``games`` are sorted by id; ``max_steps`` is an
    episode's default length, ``step_cap`` the longest one :meth:`open` may be asked for.
    Raises :class:`FileNotFoundError` if ``root`` is missing and :class:`ValueError` if it
    holds no playable game."""

    def __init__(self, root: Path, max_steps: int, step_cap: int | None = None) -> None:
        from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

        cache_textworld_parses()
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"no ALFWorld games at {self.root}")
        self.max_steps = max_steps
        # The engine's own step limit: the longest episode any session may ask for.
        self.step_cap = max(max_steps, step_cap or max_steps)
        with _quiet():
            self._tw = AlfredTWEnv(alfworld_config(self.root, self.step_cap), train_eval="train")
        games = []
        for f in self._tw.game_files:
            path = Path(f).resolve()
            traj = json.loads((path.parent / "traj_data.json").read_text())
            game_id = str(path.parent.relative_to(self.root))
            games.append(GameInfo(game_id, traj["task_type"], {"path": path}))
        if not games:
            raise ValueError(f"no solvable ALFWorld games under {self.root}")
        self.games = sorted(games, key=lambda g: g.game_id)
        self.by_id = {g.game_id: g for g in self.games}

    def engine(self, game: GameInfo) -> Any:
        """alfworld's environment for ``game`` alone (TextWorld's batch API with one slot,
        which runs in this process)."""
        with _ENGINE_LOCK:
            self._tw.game_files = [str(game_path(game))]
            with _quiet():
                return self._tw.init_env(batch_size=1)

    def open(self, game: GameInfo, max_steps: int | None = None) -> GameSession:
        """A new episode of ``game`` lasting at most ``max_steps`` actions (default
        ``self.max_steps``, at most ``step_cap``)."""
        return GameSession(self, game, min(max_steps or self.max_steps, self.step_cap))


class GameSession:
    """One ALFWorld game played step by step (an :class:`~agent2rl.rollout.env.Episode`).
    One caller at a time per session; sessions may be played from different threads (their
    engine calls take turns, see :data:`_ENGINE_LOCK`)."""

    def __init__(self, games: AlfworldGames, game: GameInfo, max_steps: int) -> None:
        self.game = game
        self.max_steps = max_steps
        with _ENGINE_LOCK:
            self._env = games.engine(game)
            self._closed = False
            obs, infos = self._env.reset()
        room, self.goal = split_intro(obs[0])
        self.steps = 0
        self.done = self.won = False
        admissible = list(infos["admissible_commands"][0])
        self.last = StepResult(room, admissible, 0.0, False, False, 0, "reset")

    def step(self, action: str) -> StepResult:
        """Play ``action`` (any text: one the game does not know gets "Nothing happens.").
        Raises :class:`RuntimeError` once the episode is over."""
        if self.done:
            raise RuntimeError("the episode is over")
        with _ENGINE_LOCK:
            obs, _scores, dones, infos = self._env.step([action])
        self.steps += 1
        won = bool(infos["won"][0])
        self.done = bool(dones[0]) or won or self.steps >= self.max_steps
        self.last = StepResult(
            obs[0],
            list(infos["admissible_commands"][0]),
            1.0 if won and not self.won else 0.0,
            self.done,
            won,
            self.steps,
        )
        self.won = won
        return self.last

    def close(self) -> None:
        """Release the game's engine (idempotent)."""
        if not self._closed:
            self._closed = True
            with _ENGINE_LOCK:
                self._env.close()
