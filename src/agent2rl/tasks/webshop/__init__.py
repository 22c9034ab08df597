"""``webshop`` and ``webshop-lite`` (level 3, interactive rollout): buy what an instruction
asks for in WebShop's simulated shop.

::

    catalog.py        WebShop's catalog files, read as WebShop reads them; its goals
    engine.py         the shop: pages, actions, BM25 search (bm25s)
    reward.py         WebShop's purchase reward (rapidfuzz; a stand-in for spaCy's nouns)
    games.py          ShopGames / ShopEpisode: goals as the rollout layer's games
    splits.py         graded / validation / public goals; the expert's walkthroughs
    store.py          a task's data in the store; the official files' import
    outcome.py        the scorer: mean reward, success rate, reward >= 0.5 rate
    protocol.py       the prompt and action protocol (standard library only: copied into
                      the workspace as data/protocol.py)
    generate_lite.py  webshop-lite's catalog generator (WebShop's file formats)

The model shops for each private goal through the task-neutral episode solver: at every
step the protocol builds the prompt, the model replies greedily and the parsed action is
played, until it buys (the purchase reward ends the session) or ``max_steps`` actions are
used (docs/tasks/webshop.md).

- ``webshop``: the real 1,000-product catalog (``agent2rl data import webshop DIR``); graded:
  the first 100 synthetic goals of WebShop's seeded session order (what the reference code
  grades, sessions 0-99); the reference's defaults (:class:`Webshop`'s versions).
- ``webshop-lite``: a generated catalog in WebShop's formats; the same engine, reward and
  code path; prompts sized for the tiny model.

Both: the public goals with the expert's walkthroughs in the workspace, and a rollout
service over the public goals for online RL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.dataset import PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.files import read_jsonl, write_jsonl
from agent2rl.rollout.app import describe_api
from agent2rl.solvers.episode import EpisodeSolver
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task
from agent2rl.tasks.shared.interactive import (
    InteractiveTask,
    batch_size_option,
    count_lines,
    env_batch_option,
)
from agent2rl.tasks.shared.store import is_built
from agent2rl.tasks.webshop import protocol
from agent2rl.tasks.webshop.catalog import CATALOG_FILES, load_catalog
from agent2rl.tasks.webshop.engine import Shop
from agent2rl.tasks.webshop.games import ShopGames
from agent2rl.tasks.webshop.generate_lite import GENERATOR_VERSION, write_catalog
from agent2rl.tasks.webshop.outcome import SCORES, PurchaseOutcome
from agent2rl.tasks.webshop.protocol import EpisodeFormat
from agent2rl.tasks.webshop.splits import expert_walkthrough, split_goals
from agent2rl.tasks.webshop.store import build_store, catalog_dir, find_webshop_files
from agent2rl.tasks.webshop.system_turn import SystemTurnSolver

#: the longest session a rollout-service client may ask for
MAX_SESSION_STEPS = 200
# the choices of the options of these names (their help says what each means)
PROTOCOLS = ("transcript", "react")
INVALID_MODES = ("refuse", "env")


# The tasks' options.
_HISTORY_HELP = "Earlier steps the prompt shows."
_ADMISSIBLE_HELP = "Whether the prompt lists the page's actions."
_PROMPT_CHARS_HELP = "The longest prompt, in characters (older steps go first)."
_OBS_CHARS_HELP = "Each page cut to this many characters in the prompt; 0: whole."
_SEPARATOR_HELP = "What joins a page's parts in an observation."
_SCORE_HELP = (
    "The score: `reward` (mean purchase reward x 100, WebShop's score), `success` (sessions "
    "with reward 1) or `half` (sessions with reward >= 0.5, the reference's figure)."
)


@dataclass(frozen=True)
class WebshopLiteOptions(TaskOptions):
    """``webshop-lite``'s options: agent2rl's transcript protocol, sized for the tiny
    model's 512-token context (no ``protocol`` or ``invalid`` option: transcript, refuse)."""

    n_products: int = option(300, "Products in the generated catalog.")
    n_train: int = option(600, "Public goals, each with the expert's walkthrough.")
    n_eval: int = option(48, "Graded goals.")
    n_validation: int = option(48, "Validation goals (never graded).")
    max_steps: int = option(15, "Actions per session before it ends without a purchase.")
    # Prompts that fit the tiny model's 512-token context: one earlier step, each page
    # cut to 220 characters with " | " between its parts (measured: at most ~430 tokens
    # with the expert's actions).
    history: int = option(1, _HISTORY_HELP)
    show_admissible: bool = option(False, _ADMISSIBLE_HELP)
    max_prompt_chars: int = option(520, _PROMPT_CHARS_HELP)
    max_observation_chars: int = option(220, _OBS_CHARS_HELP)
    separator: str = option(" | ", _SEPARATOR_HELP)
    max_new_tokens: int = option(48, "The most new tokens per action.")
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()
    score: str = option("reward", _SCORE_HELP, choices=SCORES)


@dataclass(frozen=True)
class WebshopOptions(TaskOptions):
    """``webshop``'s options: the reference's ReAct loop (its chat prompt, the page's
    actions listed, five earlier steps, 100 new tokens, a newline ends the action)."""

    n_walkthroughs: int = option(2000, "Public goals given the expert's walkthrough.")
    max_steps: int = option(50, "Actions per session before it ends without a purchase.")
    protocol: str = option(
        "react",
        "The episode protocol: `react` is the reference's chat ReAct prompt; `transcript` "
        "is agent2rl's.",
        choices=PROTOCOLS,
    )
    invalid: str = option(
        "env",
        "An action the page does not offer: `env` plays it as WebShop's environment does "
        "(a no-op that uses the step, the reference's); `refuse` answers HTTP 400.",
        choices=INVALID_MODES,
    )
    history: int = option(5, _HISTORY_HELP)
    show_admissible: bool = option(True, _ADMISSIBLE_HELP)
    max_prompt_chars: int = option(16000, _PROMPT_CHARS_HELP)
    max_observation_chars: int = option(0, _OBS_CHARS_HELP)
    separator: str = option(" [SEP] ", _SEPARATOR_HELP)
    max_new_tokens: int = option(100, "The most new tokens per action.")
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()
    score: str = option("half", _SCORE_HELP, choices=SCORES)


class WebshopBase(InteractiveTask):
    """What both WebShop tasks share: the shop, the protocol, the scorer, the workspace."""

    protocol_module = protocol
    config: WebshopOptions | WebshopLiteOptions

    def episode_format(self) -> EpisodeFormat:
        o = self.config
        return EpisodeFormat(
            # webshop-lite has no protocol option: agent2rl's transcript
            protocol=getattr(o, "protocol", "transcript"),
            max_steps=o.max_steps,
            history=o.history,
            max_prompt_chars=o.max_prompt_chars,
            max_new_tokens=o.max_new_tokens,
            show_admissible=o.show_admissible,
            max_observation_chars=o.max_observation_chars,
            separator=o.separator,
        )

    def lenient(self) -> bool:
        """Whether an action the page does not offer is played as a no-op (``invalid=env``,
        the reference's: WebShop's environment gets every action) rather than refused
        (``invalid=refuse``; webshop-lite, which has no such option, refuses)."""
        return getattr(self.config, "invalid", "refuse") == "env"

    def environment(self, prepared: PreparedTask, split: Split) -> ShopGames:
        return ShopGames(
            catalog_dir(prepared),
            prepared.split(split) / "goals.jsonl",
            self.config.max_steps,
            step_cap=MAX_SESSION_STEPS,
            lenient=self.lenient(),
        )

    def solver(self, prepared: PreparedTask, split: Split = "private") -> EpisodeSolver:
        """The episode solver; under ``protocol=react`` one that sends the reference's
        system message as a system turn (:mod:`~.system_turn`)."""
        base = super().solver(prepared, split)
        system = self.episode_format().system_message
        if system is None:
            return base
        return SystemTurnSolver(
            base.source, base.protocol, base.max_open, base.batch_size, system=system
        )

    def solver_settings(self, prepared: PreparedTask) -> dict[str, Any]:
        # how an action the page does not offer is played changes scores: in the hash
        invalid = "env" if self.lenient() else "refuse"
        out = {**super().solver_settings(prepared), "invalid": invalid}
        if self.episode_format().system_message is not None:
            out["system_turn"] = True  # since task version 3 (issue #39)
        return out

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """One sample per goal of ``split``, in the split's order (the graded split: WebShop's
        session order)."""
        rows = read_jsonl(prepared.split(split) / "goals.jsonl", limit)
        return [
            Sample(r["game_id"], {"game_id": r["game_id"]}, metadata={"group": r["category"]})
            for r in rows
        ]

    def item_texts(self, prepared: PreparedTask, split: Split) -> dict[str, list[str]]:
        """A goal's strings (its instruction, attributes, options...) by game id: its
        sample is the bare id, which alone would never match a copied goal."""
        out: dict[str, list[str]] = {}
        for row in read_jsonl(prepared.split(split) / "goals.jsonl"):
            texts = out.setdefault(str(row["game_id"]), [])
            for key, value in row.items():
                if key != "game_id":
                    texts.extend(v for v in _strings_of(value) if v not in texts)
        return out

    def scorer(self, prepared: PreparedTask) -> PurchaseOutcome:
        return PurchaseOutcome(self.config.score)

    def description(self, prepared: PreparedTask) -> str:
        fmt = self.episode_format()
        n_walk = count_lines(prepared.public / "walkthroughs.jsonl")
        n_public = count_lines(prepared.public / "goals.jsonl")
        n_eval = count_lines(prepared.private / "goals.jsonl")
        score = {
            "reward": "the mean purchase reward x 100 (WebShop's score)",
            "success": "the percentage of sessions with reward 1 (WebShop's success rate)",
            "half": "the percentage of sessions with reward >= 0.5 (the reference's figure)",
        }[self.config.score]
        offers = (
            "An action the page does not offer (a search off the search page, a click on "
            "something not shown, an unknown product id) is "
        )
        invalid_text = offers + (
            "played as WebShop's environment plays it: the step is used (kind `invalid`), the "
            "page stays, reward 0"
            if self.lenient()
            else "answered with HTTP 400 and changes nothing"
        )
        return f"""# Task: {self.name} (level 3, interactive rollout)

{self.summary}. Improve the base model at shopping: given an instruction ("i need a sulfate
free shampoo with scent: lavender, and price lower than 30.00 dollars"), it searches the
shop, opens products, chooses options and buys. Actions: `search[query]` on the search
page, `click[...]` on a button, product id or option shown on the page (`click[back to
search]`, `click[next >]`, `click[< prev]`, `click[b0k3x9]`, `click[lavender]`,
`click[description]`, `click[buy now]`).

The purchase is scored by WebShop's reward in [0, 1]: the share of the instruction's
attributes the product has, of its options chosen, and whether the price is under the cap,
times a type factor (1 when the product is of the kind asked for, less or 0 otherwise).
Score: {score}; the report also gives the other two.

## Data
- `data/goals.jsonl`: the {n_public} public goals (`game_id`, `category`,
  `instruction_text`, and what the reward checks: `asin` of the product the goal was made
  from, `attributes`, `goal_options`, `price_upper`).
- `data/walkthroughs.jsonl`: {n_walk} expert sessions of public goals: `game_id`, `group`
  (the category), `goal` (the instruction), `steps` (a list of `{{"observation",
  "admissible_actions", "action"}}`, the page WebShop's text mode shows and the action
  taken), `final_observation`, `won`, `reward`.
- The {n_eval} graded goals are never shown to you; the grading service plays your
  submissions on them.

## The rollout service (online RL)
{describe_api(fmt.max_steps, _REWARD_TEXT, "search[red t-shirt]")}
A step's `kind` is `search`, `click` or `purchase`. {invalid_text}; after the purchase the
session is over (HTTP 409).

## How your model is evaluated
{protocol.describe(fmt)}
"""


_REWARD_TEXT = "the purchase reward on the buying step, else 0"


LITE_CATALOG_SEED = 1


@task
class WebshopLite(WebshopBase):
    name = "webshop-lite"
    version = "3"
    summary = "WebShop-format shopping in a generated catalog (CPU-sized)"
    eval_timeout_s = 1800.0
    Options = WebshopLiteOptions
    config: WebshopLiteOptions

    def prepare(self, root: Path) -> PreparedTask:
        o = self.config
        if min(o.n_products, o.n_eval, o.n_validation) < 1 or o.n_train < 0:
            raise UserError("webshop-lite needs n_products, n_eval, n_validation >= 1")
        sets = root / (
            f"g{GENERATOR_VERSION}-p{o.n_products}-train{o.n_train}-eval{o.n_eval}"
            f"-val{o.n_validation}-steps{o.max_steps}"
        )
        prepared = PreparedTask(sets / "public", sets / "private", sets / "validation")
        if is_built(sets):
            return prepared
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".catalog.", dir=root) as source:
            write_catalog(Path(source), LITE_CATALOG_SEED, o.n_products)
            build_store(
                Path(source), sets, o.n_eval, o.n_validation, o.n_train, o.max_steps,
                with_human=False,
            )  # fmt: skip
        return prepared

    def make_data(self, out: Path, n: int, seed: int) -> str:
        """``n`` products from ``seed`` in WebShop's three files, plus every goal they make
        (``goals.jsonl``, in WebShop's session order) and the expert's walkthroughs of
        them (``walkthroughs.jsonl``)."""
        if n < 1:
            raise UserError(f"--n {n}: generate at least one product")
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out} is not empty: choose a new folder for the catalog")
        write_catalog(out, seed, n)
        shop = Shop(load_catalog(out))
        goals = split_goals(shop.catalog, 0, 0, with_human=False).public
        rows = [expert_walkthrough(shop, g, self.config.max_steps) for g in goals]
        walks = [r for r in rows if r is not None]
        write_jsonl(out / "goals.jsonl", goals)
        write_jsonl(out / "walkthroughs.jsonl", walks)
        return (
            f"{n} products in {out} (WebShop's three files), {len(goals)} goals in "
            f"goals.jsonl, {len(walks)} expert walkthroughs in walkthroughs.jsonl"
        )


#: the reference grades WebShop sessions 0-99 (RD-Agent autorl_bench, benchmarks/webshop)
WEBSHOP_GRADED = 100
WEBSHOP_VALIDATION = 100


@task
class Webshop(WebshopBase):
    name = "webshop"
    # Version 3: the reference's system message as a system turn (was the user message's
    # start). Version 2: the reference's score (the share of sessions with reward >= 0.5), prompt
    # (its chat ReAct text) and handling of actions the page does not offer (the
    # environment's no-op). Version 1: score=reward (the mean reward), the transcript
    # protocol with the action list, such actions refused.
    version = "3"
    summary = "WebShop (1,000-product catalog; the reference's 100 graded sessions)"
    workspace_exclude = ()
    Options = WebshopOptions
    config: WebshopOptions

    def prepare(self, root: Path) -> PreparedTask:
        sets = root / f"w{self.config.n_walkthroughs}-steps{self.config.max_steps}"
        prepared = PreparedTask(sets / "public", sets / "private", sets / "validation")
        if is_built(sets):
            return prepared
        imported = root / "import"
        if not (imported / "items_shuffle_1000.json").exists():
            env = os.environ.get("WEBSHOP_DATA")
            for cand in [*([Path(env)] if env else []), Path.home() / ".cache" / "webshop"]:
                with contextlib.suppress(UserError):
                    self.import_data(cand, root)
                    break
            else:
                raise UserError(
                    "webshop's catalog is not imported: download WebShop's "
                    "items_shuffle_1000.json, items_ins_v2_1000.json and items_human_ins.json "
                    "(its setup.sh -d small) and run `agent2rl data import webshop DIR`, or "
                    "set WEBSHOP_DATA to their folder"
                )
        build_store(
            imported, sets, WEBSHOP_GRADED, WEBSHOP_VALIDATION, self.config.n_walkthroughs,
            self.config.max_steps,
        )  # fmt: skip
        return prepared

    def import_data(self, source: Path, root: Path) -> str:
        folder = find_webshop_files(source)
        dest = root / "import"
        dest.mkdir(parents=True, exist_ok=True)
        for name in CATALOG_FILES:
            if (folder / name).exists():
                shutil.copyfile(folder / name, dest / name)
        catalog = load_catalog(dest)
        goals = split_goals(catalog, WEBSHOP_GRADED, WEBSHOP_VALIDATION)
        return (
            f"imported {len(catalog.products)} products from {folder} into {dest}: "
            f"{len(goals.private)} graded goals (WebShop sessions 0-{WEBSHOP_GRADED - 1}), "
            f"{len(goals.validation)} validation, {len(goals.public)} public"
        )


def _strings_of(value: Any) -> list[str]:
    """Every string inside ``value`` (dicts and lists walked; numbers and other values skipped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_of(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings_of(v)]
    return []
