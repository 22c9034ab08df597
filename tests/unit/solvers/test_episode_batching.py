"""The step-synchronous episode solver: its per-item results do not depend on how many games
share a batch (one at a time, a window refilled as games end, every game at once), and a
completion stops at the protocol's stop string while generating rather than at
``max_new_tokens``.

The model is the tiny architecture with larger random weights (``initializer_range`` 0.3):
the built-in tiny model answers every prompt alike, which would make the comparisons
vacuous; this one writes varied text whose greedy tokens follow small numeric differences,
so a batch that changed the numerics would show.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from support.cli import LITE_OPTS

from agent2rl.inference import load_backend
from agent2rl.inference.backend import GenerationSettings
from agent2rl.models.tiny import save_model
from agent2rl.settings import load_settings
from agent2rl.solvers import EpisodeSolver
from agent2rl.solvers.env_pool import ProcessGames
from agent2rl.tasks import get_task, prepare_task

#: short episodes keep the one-game-at-a-time play (one generate call per step) to seconds
MAX_STEPS = 3


@pytest.fixture(scope="module")
def varied_backend(tmp_path_factory: pytest.TempPathFactory, tiny):
    from transformers import AutoTokenizer

    model = save_model(
        tmp_path_factory.mktemp("varied") / "model", AutoTokenizer.from_pretrained(tiny.path),
        seed=3, initializer_range=0.3,
    )  # fmt: skip
    backend = load_backend(model, "transformers")
    yield backend
    backend.close()


def _traces(outputs) -> list[tuple]:
    return [
        (o.text, tuple(o.trace["actions"]), o.trace["won"], o.trace["reward"], o.trace["steps"])
        for o in outputs
    ]


@pytest.mark.parametrize(
    ("name", "opts"),
    [
        # ALFWorld: generating its games, spawning the workers and loading each game (~0.7 s)
        # make this a minute on a shared two-core machine
        pytest.param(
            "alfworld-lite", {**LITE_OPTS, "max_steps": str(MAX_STEPS)}, marks=pytest.mark.slow
        ),
        ("webshop-lite", {"max_steps": str(MAX_STEPS)}),
    ],
)
def test_results_do_not_depend_on_the_batch(varied_backend, name, opts) -> None:
    task = get_task(name, opts)
    prepared = prepare_task(task, load_settings().task_store)
    samples = task.samples(prepared, "private", 5)
    solver = task.solver(prepared, "private")
    plain = task.environment(prepared, "private")
    # Games played in worker processes (ProcessGames: ALFWorld's on 2+ cores and enough
    # games) give the same results as in this process
    factory = functools.partial(task.environment, prepared, "private")  # the task pickled
    sources = {"task": ProcessGames(plain, factory, 2), "in-process": plain}
    results = {}
    for max_open, batch_size, source in [
        (1, 1, "in-process"),
        (4, 2, "task"),
        (64, 64, "task"),
        (64, 64, "in-process"),
    ]:
        s = EpisodeSolver(sources[source], solver.protocol, max_open, batch_size)
        outputs = s.solve(varied_backend, samples)
        results[max_open, source] = _traces(outputs)
        # one generate call per step of the window: its batch is never over max_open
        assert s.timings.prompts == sum(o.trace["steps"] for o in outputs)
        assert s.timings.prompts <= s.timings.generate_calls * max_open
    first = results[1, "in-process"]
    assert len(first) == len(samples)
    assert all(r == first for r in results.values())
    # the replies vary (else the comparison says nothing)
    assert len({t[1] for t in first}) > 1
    assert all(t[4] == MAX_STEPS for t in first)
    # the solve stopped its workers
    assert sources["task"]._workers == []


def test_a_completion_stops_at_its_stop_string_while_generating(varied_backend) -> None:
    """A stop string ends a sequence's generation (not only its returned text): a batch
    whose every completion meets the stop string runs far fewer forward passes than
    ``max_new_tokens``."""
    calls = []
    hook = varied_backend.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        prompts = ["go to desk 1\n> ", "take the mug from the shelf\n> "]
        free = varied_backend.generate(prompts, GenerationSettings(max_new_tokens=60))
        # stop at the first character each free completion has after its first token
        stops = tuple(sorted({t[1] for t in free}))
        calls.clear()
        cut = varied_backend.generate(prompts, GenerationSettings(max_new_tokens=60, stop=stops))
    finally:
        hook.remove()
    assert all(len(c) < len(f) for c, f in zip(cut, free, strict=True))
    assert len(calls) < 60 // 2, f"{len(calls)} forward passes for a 60-token limit"


def test_an_episode_over_at_its_opening_takes_no_step(varied_backend, tmp_path: Path) -> None:
    """Zero steps per episode: every game is opened, closed and reported without a
    generate call."""
    task = get_task("webshop-lite", {})
    prepared = prepare_task(task, load_settings().task_store)
    samples = task.samples(prepared, "private", 3)
    base = task.solver(prepared, "private")

    class NoSteps:
        max_steps = 0

        def __getattr__(self, name):
            return getattr(base.protocol, name)

    solver = EpisodeSolver(base.source, NoSteps())  # type: ignore[arg-type]
    outputs = solver.solve(varied_backend, samples)
    assert [o.trace["steps"] for o in outputs] == [0, 0, 0]
    assert solver.timings.generate_calls == 0


def _shop_pool(workers: int, persistent: bool = False):
    task = get_task("webshop-lite", {})
    prepared = prepare_task(task, load_settings().task_store)
    plain = task.environment(prepared, "private")
    factory = functools.partial(task.environment, prepared, "private")  # the task pickled
    return ProcessGames(plain, factory, workers, persistent), plain


def test_worker_episodes_refuse_as_in_process_and_a_dead_worker_is_an_error() -> None:
    """An action the environment refuses is a ValueError through the pool as in process
    (the solver counts it as a turn); a worker that dies mid-episode is a RuntimeError
    naming it (never a hang), and release() stops the other workers."""
    pool, plain = _shop_pool(2)
    try:
        game = plain.games[0]
        a, b = pool.open(game), pool.open(plain.games[1])
        assert (a.goal, a.last) == (plain.open(game).goal, plain.open(game).last)
        assert {a.lane, b.lane} == {0, 1}
        with pytest.raises(ValueError):
            a.step("click[no such button]")
        victim = pool._workers[b.lane].proc
        victim.kill()
        victim.join()
        with pytest.raises(RuntimeError, match="environment worker .* died"):
            b.step("search[red dress]")
        procs = [w.proc for w in pool._workers]
    finally:
        pool.release()
    assert not any(p.is_alive() for p in procs)


def test_a_persistent_pool_keeps_its_workers_and_replaces_a_dead_one(varied_backend) -> None:
    """A persistent pool (a warm grader's) serves solve after solve from the same worker
    processes with the same results as a fresh pool; a worker that died between two solves
    is found by the next solve's first open and the workers are started afresh (the solve
    succeeds); close() stops them."""
    task = get_task("webshop-lite", {"max_steps": str(MAX_STEPS)})
    prepared = prepare_task(task, load_settings().task_store)
    samples = task.samples(prepared, "private", 4)
    protocol = task.solver(prepared, "private").protocol
    pool, plain = _shop_pool(2, persistent=True)
    try:
        expected = _traces(EpisodeSolver(plain, protocol).solve(varied_backend, samples))
        first = _traces(EpisodeSolver(pool, protocol).solve(varied_backend, samples))
        kept = [w.proc for w in pool._workers]
        assert len(kept) == 2 and all(p.is_alive() for p in kept)  # release() kept them
        again = _traces(EpisodeSolver(pool, protocol).solve(varied_backend, samples))
        assert [w.proc for w in pool._workers] == kept
        assert first == again == expected
        kept[0].kill()
        kept[0].join()
        after = _traces(EpisodeSolver(pool, protocol).solve(varied_backend, samples))
        assert after == expected
        fresh = [w.proc for w in pool._workers]
        assert len(fresh) == 2 and not set(fresh) & set(kept)
        assert not kept[1].is_alive()  # the survivor was stopped with the dead one
    finally:
        pool.close()
    assert pool._workers == [] and not any(p.is_alive() for p in fresh)
    pool.close()  # idempotent
