"""ALFWorld-format games generated offline: the ``alfworld-lite`` game sets.

Each game is a directory in ALFWorld's on-disk format, exactly what ``alfworld-generate``
produces from the official ALFRED data::

    <task_type>-<Object>-<MRecep>-<Parent>-<scene>/trial_<seed>_<index>/
        traj_data.json       task_type, pddl_params, a templated goal (as its annotation)
        initial_state.pddl   the PDDL problem: objects, receptacles, locations, facts, goal
        game.tw-pddl         {"pddl_domain", "grammar", "pddl_problem", "solvable",
                              "walkthrough"}, from alfworld's bundled alfred.pddl/alfred.twl2

so they load through the official ``AlfredTWEnv`` code path like full ALFWorld games. The
rooms are small (a few receptacles and objects) so that solutions are short and a tiny model
can learn them on a CPU. Every game covers one of ALFWorld's six task types with the goal
taken from alfworld's own goal library, and is kept only if alfworld's hand-coded expert (the
expert ``alfworld-generate`` uses) wins it within :data:`EXPERT_MAX_STEPS` steps; its actions
are the game's walkthrough.

Generation is deterministic: a game depends only on ``(seed, index)`` (the global ``random``
state the expert uses is seeded per game and restored afterwards)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agent2rl.tasks.alfworld.protocol import split_intro

J = TypeVar("J")
R = TypeVar("R")

#: bump whenever generated games change (it versions the task's data)
GENERATOR_VERSION = "2"
#: a game whose expert needs more steps than this is discarded: solutions stay short, and
#: every game can be won within alfworld-lite's default step limit (20)
EXPERT_MAX_STEPS = 20

OPENABLE = {"Cabinet", "Drawer", "Fridge", "Microwave", "Safe"}
#: receptacles whose ALFRED id carries a basin suffix ("Sink|...|SinkBasin" -> "sinkbasin 1")
BASINS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
#: receptacles a desk lamp stands on
LAMP_HOLDERS = ("Desk", "SideTable")

#: the floor plans: each scene is one room with a fixed set of receptacles (as ALFRED's games
#: share floor plans) and the objects that may appear in it. The vocabulary is small on
#: purpose: a tiny model must learn every name it types.
SCENES: dict[str, dict[str, tuple[str, ...]]] = {
    "kitchen": {
        "receptacles": ("CounterTop", "Fridge", "Microwave", "SinkBasin"),
        "objects": ("Apple", "Mug", "Egg", "Potato"),
    },
    "bedroom": {
        "receptacles": ("Desk", "SideTable", "Shelf", "Bed"),
        "objects": ("Book", "Pen", "KeyChain", "CellPhone", "Mug"),
    },
    "bathroom": {
        "receptacles": ("CounterTop", "SinkBasin", "Toilet"),
        "objects": ("SoapBar", "Cloth", "SprayBottle"),
    },
}

#: ALFWorld's six task types (in alfworld's id order, 1-6) -> the scenes the type can happen
#: in, the appliance that transforms its object and the property that object needs
_TASKS: dict[str, tuple[tuple[str, ...], str | None, str | None]] = {
    "pick_and_place_simple": (("kitchen", "bedroom", "bathroom"), None, None),
    "look_at_obj_in_light": (("bedroom",), None, None),
    "pick_clean_then_place_in_recep": (("kitchen", "bathroom"), "SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": (("kitchen",), "Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": (("kitchen",), "Fridge", "Coolable"),
    "pick_two_obj_and_place": (("kitchen", "bedroom", "bathroom"), None, None),
}
TASK_TYPES = tuple(_TASKS)
# Types the domain's actions name as constants: every problem must declare them.
_DOMAIN_RTYPES = ("SinkBasinType", "MicrowaveType", "FridgeType", "BathtubBasinType")
_DOMAIN_OTYPES = ("KnifeType", "ButterKnifeType")


@dataclass
class GameSpec:
    """One generated game before it is written: the room, the task and its goal text."""

    task_type: str
    scene: str
    receptacles: list[str]  # receptacle classes, one entry per instance
    objects: list[tuple[str, int]]  # (object class, index into receptacles it starts in)
    object_target: str = ""
    parent_target: str = ""
    toggle_target: str = ""
    goal: str = ""
    seed: int = 0
    index: int = 0

    @property
    def name(self) -> str:
        """ALFRED's folder name: ``<task>-<Object>-<MRecep>-<Parent>-<scene>``."""
        parent = (
            self.toggle_target if self.task_type == "look_at_obj_in_light" else self.parent_target
        )
        return f"{self.task_type}-{self.object_target}-None-{parent}-lite{self.scene}"

    @property
    def trial(self) -> str:
        return f"trial_{self.seed}_{self.index:05d}"


def _constants() -> Any:
    import alfworld.gen.constants as constants

    return constants


def _can_contain(receptacle: str, obj: str) -> bool:
    return obj in _constants().VAL_RECEPTACLE_OBJECTS.get(receptacle, ())


def _has(obj: str, prop: str) -> bool:
    return obj in _constants().VAL_ACTION_OBJECTS[prop]


def sample_game(rng: random.Random, task_type: str, seed: int, index: int) -> GameSpec | None:
    """Draw a scene, a placement of 1-4 objects and a task of ``task_type``; None when the
    draw cannot host the task (the caller draws again). The target never starts where the
    goal wants it, so no game is won before the first step."""
    scenes, appliance, prop = _TASKS[task_type]
    scene = rng.choice(scenes)
    kinds = SCENES[scene]
    toggle, lamp_at = "", ""
    if task_type == "look_at_obj_in_light":
        lamp_at = rng.choice([r for r in LAMP_HOLDERS if r in kinds["receptacles"]])
        toggle = "DeskLamp"
    receptacles = list(kinds["receptacles"])

    candidates = [o for o in kinds["objects"] if prop is None or _has(o, prop)]
    rng.shuffle(candidates)
    for obj in candidates:
        homes = [i for i, r in enumerate(receptacles) if _can_contain(r, obj)]
        # the goal's receptacle: any class here that can hold the object, other than the
        # appliance used to transform it (ALFRED's goals never put a hot mug "in microwave")
        parents = sorted({receptacles[i] for i in homes if receptacles[i] != appliance})
        if task_type == "look_at_obj_in_light":
            parents = ["-"]
        if not parents:
            continue
        parent = rng.choice(parents)
        starts = [i for i in homes if receptacles[i] != parent]
        if starts:
            break
    else:
        return None
    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    objects = [(obj, rng.choice(starts)) for _ in range(n_targets)]
    if task_type == "look_at_obj_in_light":
        objects.append(("DeskLamp", receptacles.index(lamp_at)))
    for _ in range(rng.randint(0, 2)):  # distractors
        other = rng.choice(kinds["objects"])
        if other == obj:
            continue
        homes = [i for i, r in enumerate(receptacles) if _can_contain(r, other)]
        if homes:
            objects.append((other, rng.choice(homes)))
    spec = GameSpec(
        task_type=task_type,
        scene=scene,
        receptacles=receptacles,
        objects=objects,
        object_target=obj,
        parent_target="" if parent == "-" else parent,
        toggle_target=toggle,
        seed=seed,
        index=index,
    )
    spec.goal = goal_text(rng, spec)
    return spec


def goal_text(rng: random.Random, spec: GameSpec) -> str:
    """The goal as ALFWorld words it: one of alfworld's templates for the task type, drawn
    with ``rng`` (alfworld's own helper draws from the global ``random``)."""
    from alfworld.gen import goal_library

    template = rng.choice(goal_library.gdict[spec.task_type]["templates"])
    return template.format(
        obj=spec.object_target.lower(),
        recep=spec.parent_target.lower(),
        toggle=spec.toggle_target.lower(),
        mrecep="",
    )


def _entity_id(cls: str, n: int, rng: random.Random) -> str:
    """An ALFRED-style mangled id (``Mug|+00.12|+00.90|-01.35``) that alfworld's demangler
    turns into ``mug <k>``; basins carry the suffix the demangler expects."""

    def coord() -> str:
        v = rng.randint(0, 399)
        sign = "_plus_" if rng.random() < 0.5 else "_minus_"
        return f"{sign}{v // 100:02d}_dot_{v % 100:02d}"

    base = BASINS.get(cls, cls)
    # The first coordinate carries ``n`` so two instances can never share an id.
    mangled = f"{base}_bar__plus_{n:02d}_dot_{rng.randint(0, 99):02d}_bar_{coord()}_bar_{coord()}"
    if cls in BASINS:
        mangled += f"_bar_{cls}"
    return mangled


def problem_pddl(spec: GameSpec, rng: random.Random) -> str:
    """The PDDL problem (``initial_state.pddl``) for ``spec``, in the layout of ALFRED's."""
    from alfworld.gen import goal_library

    constants = _constants()
    rec_ids = [_entity_id(r, i, rng) for i, r in enumerate(spec.receptacles)]
    obj_ids = [_entity_id(o, i, rng) for i, (o, _) in enumerate(spec.objects)]
    locs = [f"loc_bar_{i + 1}_bar__minus_{i + 2}_bar_{i % 4}_bar_45" for i in range(len(rec_ids))]
    start = "loc_bar_0_bar_0_bar_0_bar_30"  # the middle of the room, near no receptacle
    otypes = sorted({o for o, _ in spec.objects} | {t[:-4] for t in _DOMAIN_OTYPES})
    rtypes = sorted({r for r in spec.receptacles} | {t[:-4] for t in _DOMAIN_RTYPES})
    lines = [
        f"(define (problem plan_{spec.trial})",
        "(:domain alfred)",
        "(:objects",
        "agent1 - agent",
    ]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in rtypes]
    lines += [f"        {i} - object" for i in obj_ids]
    lines += [f"        {i} - receptacle" for i in rec_ids]
    lines += [f"        {loc} - location" for loc in [*locs, start]]
    lines += ["        )", "", "(:init", ""]
    recs = list(zip(rec_ids, spec.receptacles, locs, strict=True))
    objs = [(oid, cls, home) for oid, (cls, home) in zip(obj_ids, spec.objects, strict=True)]
    lines += [f"        (receptacleType {rid} {cls}Type)" for rid, cls, _ in recs]
    lines += [f"        (objectType {oid} {cls}Type)" for oid, cls, _ in objs]
    lines += [
        f"        (canContain {r}Type {o}Type)"
        for r in rtypes
        for o in otypes
        if _can_contain(r, o)
    ]
    lines += [f"        (openable {rid})" for rid, cls, _ in recs if cls in OPENABLE]
    for oid, cls, _ in objs:
        toggleable = cls in constants.VAL_ACTION_OBJECTS["Toggleable"]
        lines.append(f"        ({'toggleable' if toggleable else 'pickupable'} {oid})")
        for prop in ("Heatable", "Coolable", "Cleanable"):
            if _has(cls, prop):
                lines.append(f"        ({prop.lower()} {oid})")
        if cls in constants.VAL_RECEPTACLE_OBJECTS:
            lines.append(f"        (isReceptacleObject {oid})")
    lines += [f"        (inReceptacle {oid} {rec_ids[home]})" for oid, _, home in objs]
    lines += [f"        (receptacleAtLocation {rid} {loc})" for rid, _, loc in recs]
    lines += [f"        (objectAtLocation {oid} {locs[home]})" for oid, _, home in objs]
    lines.append(f"        (atLocation agent1 {start})")
    lines += ["        )", ""]
    goal = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep=""
    )
    lines.append(goal.replace("#", "-").strip("\n"))
    return "\n".join(lines) + "\n"


def traj_data(spec: GameSpec, signature: str) -> dict[str, Any]:
    """``traj_data.json``: the fields alfworld reads (task type, PDDL parameters) plus the
    templated goal as the annotation, and where the game came from (with its signature)."""
    return {
        "task_type": spec.task_type,
        "task_id": spec.trial,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"lite-{spec.scene}", "random_seed": spec.seed},
        "turk_annotations": {"anns": [{"task_desc": spec.goal + ".", "high_descs": []}]},
        "agent2rl": {
            "generator": GENERATOR_VERSION,
            "seed": spec.seed,
            "index": spec.index,
            "signature": signature,
        },
    }


def game_data(spec: GameSpec, pddl: str) -> dict[str, Any]:
    """``game.tw-pddl`` before solving: alfworld's bundled domain and grammar, the goal put
    into the grammar as ``alfworld.agents.utils.misc.add_task_to_grammar`` does."""
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    grammar = Path(ALFRED_TWL2_PATH).read_text().replace("UNKNOWN GOAL", spec.goal)
    return {
        "pddl_domain": Path(ALFRED_PDDL_PATH).read_text(),
        "grammar": grammar,
        "pddl_problem": pddl,
        "solvable": None,
        "walkthrough": None,
    }


@dataclass
class ExpertRun:
    """The hand-coded expert's play of one game: its actions and what it saw."""

    actions: list[str]
    observations: list[str]  # observations[0] is the intro; observations[i+1] follows actions[i]
    admissible: list[list[str]]  # the admissible actions before each action (and at the end)
    won: bool

    def walkthrough_row(self, game_id: str, task_type: str) -> dict[str, Any]:
        """One line of ``walkthroughs.jsonl`` from this play. The row's ``group`` is the
        game's task type, as in the rollout service's game list."""
        room, goal = split_intro(self.observations[0])
        shown = [room, *self.observations[1:]]
        return {
            "game_id": game_id,
            "group": task_type,
            "goal": goal,
            "steps": [
                {"observation": o, "admissible_actions": list(adm), "action": a}
                for o, adm, a in zip(shown, self.admissible, self.actions, strict=False)
            ],
            "final_observation": shown[len(self.actions)] if len(shown) > len(self.actions) else "",
            "won": bool(self.won),
        }


#: actions an expert walkthrough must not use: they only print text and teach nothing
_IDLE_ACTIONS = ("help", "inventory", "examine")


def run_expert(game_file: Path, seed: int, max_steps: int = EXPERT_MAX_STEPS) -> ExpertRun | None:
    """Play ``game_file`` with alfworld's hand-coded expert through the wrappers
    ``alfworld-generate`` uses; None when the expert fails, times out, does not win or wanders
    into :data:`_IDLE_ACTIONS` (it picks random actions when lost). The expert draws from the
    global ``random``; it is seeded with ``seed`` and the previous state restored, so the
    walkthrough depends only on the game and the seed."""
    from alfworld.agents.environment.alfred_tw_env import AlfredExpertType

    saved = random.getstate()
    random.seed(seed)
    try:
        run = _play(
            game_file,
            lambda state, _n: state["extra.expert_plan"][0],
            max_steps,
            expert=AlfredExpertType.HANDCODED,
        )
    finally:
        random.setstate(saved)
    idle = run is not None and any(a.split(" ", 1)[0] in _IDLE_ACTIONS for a in run.actions)
    return run if run is not None and run.won and not idle else None


def replay_walkthrough(game_file: Path, actions: list[str]) -> ExpertRun | None:
    """Play ``actions`` in ``game_file`` and record what was seen; None if they do not win."""
    run = _play(game_file, lambda _state, n: actions[n], len(actions))
    return run if run is not None and run.won else None


def _play(
    game_file: Path, choose: Any, max_steps: int, expert: str | None = None
) -> ExpertRun | None:
    """Play ``game_file`` through alfworld's wrappers (and its expert when ``expert`` names
    one), taking ``choose(state, n)`` as the n-th action; None if the engine or expert fails."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos
    from textworld.envs import PddlEnv

    class _Expert(AlfredExpert):
        """alfworld 0.4.2's hand-coded expert notes a placement when its last action holds
        the word "put", but the game's command is "move X to Y": without this translation it
        forgets what it placed and fails every pick-two game."""

        def step(self, command: str):
            self.state, reward, done = textworld.core.Wrapper.step(self, command)
            self.prev_command = str(command).replace("move ", "put ", 1)
            self._gather_infos()
            return self.state, reward, done

    infos = textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
    env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    if expert is not None:
        env = _Expert(env, expert_type=expert)
    try:
        env.load(str(game_file))
        state = env.reset()
        run = ExpertRun([], [state.feedback], [list(state["admissible_commands"])], False)
        done = False
        while not done and len(run.actions) < max_steps:
            action = choose(state, len(run.actions))
            state, _, done = env.step(action)
            run.actions.append(action)
            run.observations.append(state.feedback)
            run.admissible.append(list(state["admissible_commands"]))
        run.won = bool(state["won"])
    except Exception:  # alfworld's expert signals failure by raising; the game is dropped
        return None
    finally:
        env.close()
    return run


def _signature(spec: GameSpec) -> str:
    """What makes two games the same (room, placement, goal), ids and numbering aside."""
    blob = json.dumps(
        [spec.task_type, spec.scene, spec.receptacles, spec.objects, spec.goal], sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GeneratedGame:
    """A written game: its id (path relative to the split root) and its expert's play."""

    game_id: str
    task_type: str
    goal: str
    expert: ExpertRun
    signature: str


def generate_game(dest_root: Path, seed: int, index: int, exclude: set[str]) -> GeneratedGame:
    """Generate game ``index`` of the set drawn from ``seed`` into ``dest_root``. Task types
    cycle through :data:`TASK_TYPES` so a set is balanced. Draws that cannot host the task,
    that repeat a game in ``exclude`` (signatures), or that the expert cannot win are redrawn
    from the same deterministic stream."""
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    dest_root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"alfworld-lite/{GENERATOR_VERSION}/{seed}/{index}")
    for _ in range(200):
        spec = sample_game(rng, task_type, seed, index)
        if spec is None:
            continue
        sig = _signature(spec)
        if sig in exclude:
            continue
        pddl = problem_pddl(spec, rng)
        game_dir = dest_root / spec.name / spec.trial
        tmp = Path(tempfile.mkdtemp(prefix=".game-", dir=dest_root))
        try:
            data = game_data(spec, pddl)
            (tmp / "initial_state.pddl").write_text(pddl)
            (tmp / "traj_data.json").write_text(json.dumps(traj_data(spec, sig), indent=1))
            (tmp / "game.tw-pddl").write_text(json.dumps(data))
            expert = run_expert(tmp / "game.tw-pddl", seed=rng.randrange(2**31))
            if expert is None:
                continue
            data["solvable"], data["walkthrough"] = True, expert.actions
            (tmp / "game.tw-pddl").write_text(json.dumps(data))
            game_dir.parent.mkdir(parents=True, exist_ok=True)
            if game_dir.exists():
                shutil.rmtree(game_dir)
            os.replace(tmp, game_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        game_id = f"{spec.name}/{spec.trial}"
        return GeneratedGame(game_id, task_type, spec.goal, expert, sig)
    raise RuntimeError(f"could not generate game {index} of seed {seed} in 200 draws")


def map_in_workers(fn: Callable[[J], R], jobs: list[J], chunksize: int) -> list[R]:
    """``fn`` of each job, in order, in worker processes (the CPUs, at most 8, for
    generating or replaying games); in this process for a single job or CPU."""
    n_workers = min(8, os.cpu_count() or 1, len(jobs))
    if n_workers > 1:
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            return list(pool.map(fn, jobs, chunksize=chunksize))
    return [fn(j) for j in jobs]


def _generate_one(args: tuple[str, int, int, frozenset[str]]) -> dict[str, Any]:
    root, seed, index, exclude = args
    g = generate_game(Path(root), seed, index, set(exclude))
    return {"signature": g.signature, "row": g.expert.walkthrough_row(g.game_id, g.task_type)}


def generate_lite_split(
    root: Path, seed: int, n: int, exclude: set[str]
) -> tuple[list[dict[str, Any]], set[str]]:
    """``n`` games from ``seed`` into ``root``, none with a signature in ``exclude`` (in
    worker processes; the result does not depend on how many). Returns their walkthrough rows
    (by index) and signatures."""
    root.mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), seed, i, frozenset(exclude)) for i in range(n)]
    done = map_in_workers(_generate_one, jobs, chunksize=4)
    return [d["row"] for d in done], {d["signature"] for d in done}
