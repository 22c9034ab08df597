"""``deepsearchqa`` and ``deepsearch-lite`` (level 3, interactive rollout): answer questions
that take several searches, DeepSearchQA's way (docs/tasks/deepsearch.md: the data, the
split, each protocol, search backend, judge and metric, and how they differ from the
paper's reference).

::

    protocol.py       the prompt and action protocol, and the exact-match scoring (standard
                      library only: copied into the workspace as data/protocol.py)
    react.py          the grader's loop under protocol=reference: the reference's, exactly
    search.py         SearchBackend: BM25 over a local corpus (bm25s), SerpAPI (SERPAPI_KEY),
                      Wikipedia's search API (keyless web search)
    games.py          QuestionGames / SearchEpisode: questions as the rollout layer's games;
                      the expert's walkthroughs
    generate_lite.py  deepsearch-lite's world: fictional entities, linked facts, questions
    store.py          a task's data in the store; DeepSearchQA's import and split
    judge.py          the binary judge and DeepSearchQA's rubric on an OpenAI-compatible
                      judge (the L2 plumbing)
    outcome.py        the scorer: accuracy or F1; precision, recall, the outcome categories

The model answers each private question in a loop: at every step the protocol builds the
prompt, the model replies greedily with a search or an answer, until it answers or
``max_steps`` actions are used. The scorer's settings say how answers were graded, so
different gradings never compare. ``deepsearchqa``'s defaults are the reference's;
``deepsearch-lite`` is offline and CPU-sized (a generated encyclopedia, BM25, exact match /
F1, graded, validation and public questions from disjoint regions of its world). Both put
the public questions (with answers; the lite task's with the expert's walkthroughs) in the
workspace, and serve a rollout service over them (its reward: the exact-match correctness
of the answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent2rl.dataset import PreparedTask, Sample, Split
from agent2rl.errors import UserError
from agent2rl.files import read_json, read_jsonl, write_jsonl
from agent2rl.rollout.app import describe_api
from agent2rl.scoring.judges import CACHE_RELPATH, USAGE_FILE, judge_api_key
from agent2rl.scoring.llm_client import DEFAULT_BASE_URL
from agent2rl.settings import load_settings
from agent2rl.tasks.deepsearch import protocol
from agent2rl.tasks.deepsearch.games import QuestionGames
from agent2rl.tasks.deepsearch.generate_lite import GENERATOR_VERSION, generate_world
from agent2rl.tasks.deepsearch.judge import AnswerJudge, answer_judge
from agent2rl.tasks.deepsearch.outcome import METRICS, AnswerOutcome
from agent2rl.tasks.deepsearch.protocol import EpisodeFormat
from agent2rl.tasks.deepsearch.react import ReferenceReactSolver, reference_solver_settings
from agent2rl.tasks.deepsearch.search import (
    SEARCH_BACKENDS,
    QueryLog,
    SearchBackend,
    SearchEngine,
    serpapi_key,
)
from agent2rl.tasks.deepsearch.store import (
    QUESTIONS,
    WALKTHROUGHS,
    build_lite_store,
    corpus_file,
    download_dsqa,
    find_dsqa_files,
    read_table,
    solved_questions,
    write_dsqa_store,
)
from agent2rl.tasks.options import TaskOptions, option
from agent2rl.tasks.registry import task
from agent2rl.tasks.shared.interactive import (
    InteractiveTask,
    batch_size_option,
    count_lines,
    env_batch_option,
)
from agent2rl.tasks.shared.store import is_built

#: the longest episode a rollout-service client may ask for
MAX_SESSION_STEPS = 50
#: the grader's record of every search it made (in the evaluation's grading directory)
QUERY_LOG = "search_queries.jsonl"
# the choices of the options of these names (their help says what each means)
JUDGE_MODES = ("auto", "llm", "exact")
PROTOCOLS = ("reference", "react", "transcript")
SCORE_MODES = ("judge", "string")
JUDGE_PROMPTS = ("reference", "fenced")
#: deepsearch-lite's judge model
DEFAULT_JUDGE_MODEL = "gpt-4.1-mini"
#: deepsearchqa's: the reference judges with RD-Agent's configured chat model, which its
#: README's example configuration sets to gpt-5.2 (``CHAT_MODEL=gpt-5.2``)
REFERENCE_JUDGE_MODEL = "gpt-5.2"


# The tasks' options.
_JUDGE_HELP = (
    "Who grades answers: `llm` the LLM judge at `judge_base_url`, `exact` string or exact "
    "match, `auto` the judge when the host has a judge key (AGENT2RL_JUDGE_API_KEY or "
    "OPENAI_API_KEY)."
)
_METRIC_HELP = (
    "`accuracy` (the reference's: a binary judge, else string match) or `f1` (the rubric "
    "judge's F1 of an answer's items, else normalised exact match)."
)
_JUDGE_MODEL_HELP = "The judge model's name at `judge_base_url`."
_JUDGE_URL_HELP = "The OpenAI-compatible endpoint that serves the judge model."
_HISTORY_HELP = "Earlier steps the prompt shows."
_PROMPT_CHARS_HELP = "The longest prompt, in characters (older steps go first)."
_OBS_CHARS_HELP = "Each observation cut to this many characters in the prompt; 0: whole."


@dataclass(frozen=True)
class DeepsearchLiteOptions(TaskOptions):
    """``deepsearch-lite``'s options: agent2rl's transcript protocol (no ``protocol``
    option), prompts sized for the tiny model's 512-token context."""

    # 95 public regions (1,900 questions with walkthroughs): with version 1's 9 (180),
    # the tiny model memorised its walkthroughs and copied no name from a search result
    # into a validation question's next step, even after 3,000 SFT steps; with 95 it
    # starts to (benchmarks/deepsearch_steps.py).
    n_regions: int = option(
        100, "Regions of the generated world (graded, validation, then public ones)."
    )
    n_eval_regions: int = option(3, "Regions whose questions are graded.")
    n_validation_regions: int = option(2, "Regions whose questions are the validation split.")
    max_steps: int = option(6, "Actions (searches and the answer) per question.")
    # Prompts that fit the tiny model's 512-token context: each observation cut to 200
    # characters, and no earlier step (the question and the current results hold all
    # a step needs here; without the earlier step a training row is about 160 tokens
    # instead of 230, so the same time trains on more of them).
    history: int = option(0, _HISTORY_HELP)
    max_prompt_chars: int = option(520, _PROMPT_CHARS_HELP)
    max_observation_chars: int = option(200, _OBS_CHARS_HELP)
    max_new_tokens: int = option(48, "The most new tokens per action.")
    top_k: int = option(3, "Results a search returns.")
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()
    judge: str = option("exact", _JUDGE_HELP, choices=JUDGE_MODES)
    metric: str = option("f1", _METRIC_HELP, choices=METRICS)
    judge_model: str = option(DEFAULT_JUDGE_MODEL, _JUDGE_MODEL_HELP)
    judge_base_url: str = option(DEFAULT_BASE_URL, _JUDGE_URL_HELP)


@dataclass(frozen=True)
class DeepSearchQAOptions(TaskOptions):
    """``deepsearchqa``'s options: the reference's loop exactly (``protocol=reference``:
    :mod:`~.react`; 6 steps, 256 new tokens, SerpAPI's top 3), its judge (the reference's
    prompt on ``judge_model``), string match only as an explicit ``score=string``.
    ``history`` and ``max_prompt_chars`` apply to the ``react`` and ``transcript``
    protocols only (the reference keeps the whole history)."""

    protocol: str = option(
        "reference",
        "The episode protocol: `reference` is the reference's loop exactly (its stops, "
        "forced answers and whole history); `react` task version 2's approximation of it; "
        "`transcript` is agent2rl's (task version 1's).",
        choices=PROTOCOLS,
    )
    max_steps: int = option(6, "Actions (searches and the answer) per question.")
    history: int = option(6, _HISTORY_HELP)
    max_prompt_chars: int = option(12000, _PROMPT_CHARS_HELP)
    max_observation_chars: int = option(0, _OBS_CHARS_HELP)
    max_new_tokens: int = option(256, "The most new tokens per action.")
    top_k: int = option(3, "Results a search returns.")
    env_batch: int = env_batch_option()
    batch_size: int = batch_size_option()
    # not checked against a fixed list here: search backends are a registry that
    # installed plug-ins extend (checked when the task's search engine is chosen)
    search: str = option(
        "auto",
        "The search backend (a name in the search-backend registry: `serpapi`, `bm25`, "
        "`wikipedia` built in); `auto`: SerpAPI when SERPAPI_KEY is set, else Wikipedia.",
    )
    metric: str = option("accuracy", _METRIC_HELP, choices=METRICS)
    score: str = option(
        "judge",
        "`judge`: answers graded by the LLM judge (a run without a judge key is refused); "
        "`string`: by string match, chosen explicitly (recorded in the scorer's settings).",
        choices=SCORE_MODES,
    )
    judge: str = option("auto", _JUDGE_HELP, choices=JUDGE_MODES)
    judge_prompt: str = option(
        "reference",
        "The accuracy judge's prompt: `reference` (the reference's own: unfenced, a "
        "correct/incorrect reply, string match when a request fails) or `fenced` "
        "(agent2rl's: the response fenced by a digest id, a JSON verdict carrying it).",
        choices=JUDGE_PROMPTS,
    )
    judge_model: str = option(REFERENCE_JUDGE_MODEL, _JUDGE_MODEL_HELP)
    judge_base_url: str = option(DEFAULT_BASE_URL, _JUDGE_URL_HELP)


class DeepsearchBase(InteractiveTask):
    """What both search tasks share: the episode protocol, the search engine, the scorer,
    the description."""

    protocol_module = protocol
    config: DeepsearchLiteOptions | DeepSearchQAOptions

    # -- parts -----------------------------------------------------------------------------
    def episode_format(self) -> EpisodeFormat:
        o = self.config
        # deepsearch-lite has no protocol option: agent2rl's transcript
        kind = getattr(o, "protocol", "transcript")
        return EpisodeFormat(
            max_steps=o.max_steps,
            history=o.history,
            max_prompt_chars=o.max_prompt_chars,
            max_new_tokens=o.max_new_tokens,
            max_observation_chars=o.max_observation_chars,
            stop={"react": protocol.REACT_STOP, "reference": protocol.REFERENCE_STOP}.get(
                kind, protocol.STOP
            ),
            protocol=kind,
        )

    def search_engine(self, prepared: PreparedTask) -> SearchEngine:
        """The registered search engine this task's episodes use (here: BM25 over the
        store's corpus)."""
        return SEARCH_BACKENDS["bm25"]

    def search_backend(self, prepared: PreparedTask) -> SearchBackend:
        """The search engine every episode of this task uses (built on first use)."""
        return self.search_engine(prepared).open(corpus_file(prepared.private.parent))

    def search_identity(self, prepared: PreparedTask) -> dict[str, Any]:
        """What identifies the search results (part of the evaluation settings), without
        opening the engine."""
        return self.search_engine(prepared).identity(corpus_file(prepared.private.parent))

    def environment(self, prepared: PreparedTask, split: Split) -> QuestionGames:
        log = QueryLog(self.record_dir / QUERY_LOG if self.record_dir else None)
        return QuestionGames(
            prepared.split(split) / QUESTIONS,
            lambda: self.search_backend(prepared),
            self.config.max_steps,
            self.config.top_k,
            step_cap=MAX_SESSION_STEPS,
            log=log,
            protocol=self.episode_format().protocol,
        )

    def samples(
        self, prepared: PreparedTask, split: Split, limit: int | None = None
    ) -> list[Sample]:
        """One sample per question of ``split``, in file order: the gold answer as the
        target, the answer type and category in the metadata."""
        rows = read_jsonl(prepared.split(split) / QUESTIONS, limit)
        return [
            Sample(
                r["game_id"],
                {"game_id": r["game_id"], "question": r["question"]},
                r["answer"],
                {"group": r.get("category"), "answer_type": r["answer_type"]},
            )
            for r in rows
        ]

    def solver_settings(self, prepared: PreparedTask) -> dict[str, Any]:
        return {
            **super().solver_settings(prepared),
            "top_k": self.config.top_k,
            "search": self.search_identity(prepared),
        }

    def judge_enabled(self) -> bool:
        """Whether answers are graded by the LLM judge (the ``judge`` option; ``auto``: when
        the host has a judge key). On deepsearchqa, ``score=string`` (or ``judge=exact``)
        turns it off explicitly; ``auto`` without a key is a :class:`UserError` naming
        ``--task-opt score=string``, never a silent string match."""
        if getattr(self.config, "score", "judge") == "string":
            return False
        mode = self.config.judge
        if mode == "auto" and not judge_api_key() and hasattr(self.config, "score"):
            raise UserError(
                f"{self.name} grades answers with an LLM judge and no judge key is set: set "
                "AGENT2RL_JUDGE_API_KEY (or OPENAI_API_KEY) on the host, or grade by string "
                "match with --task-opt score=string"
            )
        return mode == "llm" or (mode == "auto" and bool(judge_api_key()))

    def judge_kind(self) -> str:
        """``rubric`` under ``metric=f1``; under ``accuracy`` the reference's prompt
        (``reference``) or agent2rl's fenced one (``binary``), by ``judge_prompt``."""
        if self.config.metric != "accuracy":
            return "rubric"
        return "reference" if getattr(self.config, "judge_prompt", "") == "reference" else "binary"

    def make_judge(self) -> AnswerJudge:
        """The judge at ``judge_base_url`` (binary under ``metric=accuracy``, the rubric
        under ``metric=f1``), cached under ``AGENT2RL_HOME`` and metered into the
        evaluation's grading directory (:attr:`record_dir`)."""
        return answer_judge(
            self.config.judge_model,
            self.config.judge_base_url,
            cache_path=load_settings().home / CACHE_RELPATH,
            usage_path=self.record_dir / USAGE_FILE if self.record_dir else None,
            kind=self.judge_kind(),
        )

    def scorer(self, prepared: PreparedTask) -> AnswerOutcome:
        judge = self.make_judge() if self.judge_enabled() else None
        return AnswerOutcome(judge, self.search_identity(prepared)["backend"], self.config.metric)

    def private_paths(self) -> list[Path]:
        """The judgment cache (under ``AGENT2RL_HOME``): the grader's, never the agent's."""
        return [load_settings().home / CACHE_RELPATH.parent]

    # -- what the agent reads --------------------------------------------------------------
    def description(self, prepared: PreparedTask) -> str:
        fmt = self.episode_format()
        n_public = count_lines(prepared.public / QUESTIONS)
        n_eval = count_lines(prepared.private / QUESTIONS)
        walks = prepared.public / WALKTHROUGHS
        n_walk = count_lines(walks) if walks.exists() else 0
        judged = self.judge_enabled()
        if self.config.metric == "accuracy":
            grading = (
                "an LLM judge's correct/incorrect verdict (a single answer is correct when it "
                "states the expected item, a set answer when it states all expected items)"
                if judged
                else "string match, no LLM judge being configured (lowercased; a single "
                "answer is correct when it contains the expected answer or is contained in "
                "it, a set answer when it contains every comma-separated expected item)"
            )
            scoring = "The score is the percentage of questions answered correctly."
        else:
            grading = (
                "an LLM judge with DeepSearchQA's rubric (for every expected item whether "
                "your answer states it, and which of your items are extraneous)"
                if judged
                else "normalised exact match (lowercase, punctuation and articles removed; "
                "a set answer's comma-separated items compared as sets); no LLM judge is "
                "configured"
            )
            scoring = (
                "An item's score is the F1 of your answer's items against the expected ones "
                "(a single answer: 1 when right); the score is the mean F1 x 100."
            )
        walk_line = (
            f"- `data/walkthroughs.jsonl`: {n_walk} expert episodes of public questions: "
            f"`game_id`, `group`, `goal` (the question), `steps` (a list of "
            f'`{{"observation", "admissible_actions", "action"}}`), `final_observation`, '
            f"`won`, `reward`.\n"
            if n_walk
            else ""
        )
        return f"""# Task: {self.name} (level 3, interactive rollout)

{self.summary}. Improve the base model at multi-step search: given a question, it searches
(`search[query]`: the top {self.config.top_k} results, `[1] Title: snippet ...`) as often as
it needs within the step limit, then answers (`answer[text]`; a question whose answer is a
set of items is answered with the items separated by commas).

Each answer is graded by {grading}. {scoring} The report also gives the accuracy, precision,
recall and DeepSearchQA's outcome categories.

## Data
- `data/questions.jsonl`: the {n_public} public questions with their answers: `game_id`,
  `question`, `answer`, `answer_type` (`single` or `set`), `category`.
{walk_line}- The {n_eval} graded questions are never shown to you; the grading service plays your
  submissions on them with the same search engine ({self.search_identity(prepared)["backend"]}).

## The rollout service (online RL)
{describe_api(fmt.max_steps, _REWARD_TEXT, "search[amber loom society founded]")}
A step's `kind` is `search` or `answer`. The answer ends the episode (its reward: 1 or 0 for
a single answer, the F1 for a set, by exact match after normalisation, as
`protocol.answer_reward` computes it); answering first, without a search, is allowed. A
malformed action (not `search[...]` or `answer[...]`, empty, over 256 characters) is
answered with HTTP 400 and changes nothing.

## How your model is evaluated
{protocol.describe(fmt)}
"""


_REWARD_TEXT = "the answer's correctness on the answering step, else 0"


#: the seed of deepsearch-lite's world
LITE_SEED = 1


@task
class DeepsearchLite(DeepsearchBase):
    name = "deepsearch-lite"
    version = "2"
    summary = "multi-hop search over a generated encyclopedia of fictional entities (CPU-sized)"
    eval_timeout_s = 1800.0
    Options = DeepsearchLiteOptions
    config: DeepsearchLiteOptions

    def prepare(self, root: Path) -> PreparedTask:
        o = self.config
        if o.n_eval_regions < 1 or o.n_validation_regions < 1:
            raise UserError("deepsearch-lite needs n_eval_regions and n_validation_regions >= 1")
        if o.n_eval_regions + o.n_validation_regions >= o.n_regions:
            raise UserError("deepsearch-lite: n_regions must exceed the graded + validation ones")
        sets = root / (
            f"g{GENERATOR_VERSION}-r{o.n_regions}-eval{o.n_eval_regions}"
            f"-val{o.n_validation_regions}-steps{o.max_steps}"
            f"-obs{o.max_observation_chars}-k{o.top_k}"
        )
        prepared = PreparedTask(sets / "public", sets / "private", sets / "validation")
        if not is_built(sets):
            build_lite_store(
                sets, LITE_SEED, o.n_regions, o.n_eval_regions,
                o.n_validation_regions, self.episode_format(), o.top_k,
            )  # fmt: skip
        return prepared

    def make_data(self, out: Path, n: int, seed: int) -> str:
        """A world of ``n`` regions from ``seed``: ``corpus.jsonl``, ``questions.jsonl``
        (every question the expert solves) and ``walkthroughs.jsonl``."""
        if n < 1:
            raise UserError(f"--n {n}: generate at least one region")
        if out.exists() and any(out.iterdir()):
            raise UserError(f"{out} is not empty: choose a new folder for the world")
        world = generate_world(seed, n)
        solved = solved_questions(world, self.episode_format(), self.config.top_k)
        questions, walks = [row for row, _ in solved], [walk for _, walk in solved]
        write_jsonl(out / "corpus.jsonl", world.documents)
        write_jsonl(out / QUESTIONS, questions)
        write_jsonl(out / WALKTHROUGHS, walks)
        return (
            f"{n} regions in {out}: {len(world.documents)} documents in corpus.jsonl, "
            f"{len(questions)} questions in questions.jsonl, {len(walks)} expert walkthroughs "
            f"in walkthroughs.jsonl"
        )


@task
class DeepSearchQA(DeepsearchBase):
    name = "deepsearchqa"
    # Version 3: the reference's loop exactly (protocol=reference: its three stops, forced
    # answers, whole history, " | "-joined snippets), its judge prompt on gpt-5.2 (the
    # README's chat model), string match only when a judge request fails or as an explicit
    # score=string (no judge key is refused). Version 2: the reference's split (numpy
    # permutation, 100 public then 200 graded), its
    # metric (accuracy: binary judge, else string match) and loop (Thought/Action, top 3,
    # SerpAPI else keyless web search). Version 1: random.Random(42) split, mean F1 with the
    # rubric judge or exact match, the transcript protocol, top 5, a local corpus preferred.
    version = "3"
    summary = "DeepSearchQA (900 multi-step search questions; 200 graded, judged by an LLM)"
    #: the questions and their answers (the graded split among them)
    denied_hub_repos = ("google/deepsearchqa",)
    Options = DeepSearchQAOptions
    config: DeepSearchQAOptions

    def prepare(self, root: Path) -> PreparedTask:
        prepared = PreparedTask(root / "public", root / "private", root / "validation")
        if not is_built(root):
            download_dsqa(root)
        return prepared

    def import_data(self, source: Path, root: Path) -> str:
        questions, corpus = find_dsqa_files(source)
        return write_dsqa_store(
            root, read_table(questions), corpus, str(Path(source).expanduser().resolve())
        )

    def solver(self, prepared: PreparedTask, split: Split = "private") -> Any:
        """Under ``protocol=reference`` the reference's loop (:mod:`~.react`); else the
        task-neutral episode solver."""
        if self.config.protocol != "reference":
            return super().solver(prepared, split)
        o = self.config
        return ReferenceReactSolver(
            self.grading_games(prepared, split),  # type: ignore[arg-type]
            o.max_steps,
            o.max_new_tokens,
            max_open=o.env_batch,
            batch_size=o.batch_size,
        )

    def solver_settings(self, prepared: PreparedTask) -> dict[str, Any]:
        if self.config.protocol != "reference":
            return super().solver_settings(prepared)
        o = self.config
        return {
            **reference_solver_settings(o.max_steps, o.max_new_tokens, o.top_k),
            "top_k": o.top_k,
            "search": self.search_identity(prepared),
        }

    def search_mode(self, prepared: PreparedTask) -> str:
        """The ``search`` option's engine name, ``auto`` resolved as the reference does
        (SerpAPI when ``SERPAPI_KEY`` is set, else a keyless web search: Wikipedia's; an
        imported local corpus only with ``search=bm25``; task version 1 preferred the corpus
        to the web). :class:`UserError` for a name not in :data:`~.search.SEARCH_BACKENDS`
        or an engine that cannot run here (no key, no corpus); a network that cannot reach
        Wikipedia shows only at the first search (:class:`~.search.SearchUnavailable`)."""
        return self.search_engine(prepared).name

    def search_engine(self, prepared: PreparedTask) -> SearchEngine:
        mode = self.config.search
        if mode == "auto":
            mode = "serpapi" if serpapi_key() else "wikipedia"
        engine = SEARCH_BACKENDS.get(mode)
        if engine is None:
            known = ", ".join(["auto", *SEARCH_BACKENDS])  # registration order
            raise UserError(f"--task-opt search={mode}: use {known}")
        why = engine.unavailable(corpus_file(prepared.private.parent))
        if why:
            raise UserError(why)
        return engine

    def description(self, prepared: PreparedTask) -> str:
        manifest = read_json(prepared.private.parent / "manifest.json")
        note = (
            ""
            if manifest.get("official_sizes")
            else "\n(This installation holds a subset of DeepSearchQA, split in thirds.)\n"
        )
        return super().description(prepared) + note
