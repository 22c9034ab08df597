"""Episodes played in worker processes, for environments whose engine is neither thread-safe
nor cheap (ALFWorld's TextWorld engine: about 0.7 s to load a game and 50-80 ms a step on
one core, all CPU-bound Python behind a per-process lock).

:class:`ProcessGames` is a :class:`~agent2rl.rollout.env.GameSource` whose episodes live in
``workers`` child processes, each building its own copy of the source from a picklable
``factory``. Its :attr:`~ProcessGames.parallelism` tells the episode solver how many engine
calls may run at once; the solver then opens and steps episodes from that many threads,
each waiting on its worker's pipe (the GIL is released while waiting). An episode keeps to
the worker that opened it (its :attr:`RemoteEpisode.lane`).

The workers are started by the first :meth:`~ProcessGames.open` and stopped by
:meth:`~ProcessGames.release` (the solver calls it after every solve), by
:meth:`~ProcessGames.close`, or when this process exits: each worker gets its parent-death
signal and exits on its pipe's end of file. A ``persistent`` pool (a warm grader's, see
:attr:`agent2rl.tasks.base.Task.keep_environments`) keeps its workers from one solve to the
next, so a grading after the first starts no process and finds TextWorld's caches filled
(the same games, loaded again). Its episodes all end with each solve; a worker found dead
(at the end of a solve, or by the first :meth:`~ProcessGames.open` after one) is replaced
with the others, so no solve starts on a broken pool. The workers are spawned (not forked:
the grader holds torch's threads), so, as with any ``multiprocessing`` spawn, a script that
grades must guard its entry point with ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from agent2rl.child_process import die_with_parent, spawner
from agent2rl.rollout.env import Episode, GameInfo, GameSource, StepResult


def _serve(conn: Connection, factory: Callable[[], GameSource]) -> None:
    """A worker's loop: one request at a time on ``conn`` until it closes."""
    die_with_parent()
    source = factory()
    episodes: dict[int, Episode] = {}
    while True:
        try:
            op, handle, arg = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if op == "open":
                ep = source.open(source.by_id[arg[0]], arg[1])
                episodes[handle] = ep
                reply: Any = (ep.goal, ep.last, ep.done, ep.max_steps)
            elif op == "step":
                last = episodes[handle].step(arg)
                reply = (last, episodes[handle].done)
            elif op == "close":
                ep = episodes.pop(handle, None)
                if ep is not None:
                    ep.close()
                reply = None
            else:
                break
            conn.send(("ok", reply))
        except ValueError as err:  # an action the environment refuses: the caller's to handle
            conn.send(("refused", str(err)))
        except Exception as err:  # noqa: BLE001 (sent back and raised in the parent)
            conn.send(("error", f"{type(err).__name__}: {err}"))
    for ep in episodes.values():
        ep.close()


class _Worker:
    def __init__(self, ctx: Any, factory: Callable[[], GameSource]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, factory), daemon=True)
        self.proc.start()
        child.close()
        self.lock = threading.Lock()  # one request in flight per worker

    def call(self, op: str, handle: int, arg: Any = None) -> Any:
        with self.lock:
            try:
                self.conn.send((op, handle, arg))
                status, reply = self.conn.recv()
            except (EOFError, OSError):  # a broken pipe either way: the worker is gone
                raise RuntimeError(
                    f"environment worker {self.proc.pid} died (exit code {self.proc.exitcode})"
                ) from None
        if status == "refused":
            raise ValueError(reply)
        if status == "error":
            raise RuntimeError(f"environment worker: {reply}")
        return reply


def _stop(workers: list[_Worker]) -> None:
    """Stop ``workers``: every pipe closed first (each worker reads end of file and exits,
    all at once: an exit takes about a quarter of a second), then each one waited for,
    killed if it has not exited within 10 s."""
    for w in workers:
        w.conn.close()
    for w in workers:
        w.proc.join(timeout=10)
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()


class RemoteEpisode:
    """An :class:`~agent2rl.rollout.env.Episode` living in a worker of :class:`ProcessGames`
    (one caller at a time, as every episode)."""

    def __init__(self, worker: _Worker, lane: int, handle: int, game: GameInfo, opened: Any):
        self._worker, self.lane, self._handle, self.game = worker, lane, handle, game
        self.goal, self.last, self.done, self.max_steps = opened
        self._closed = False

    def step(self, action: str) -> StepResult:
        self.last, self.done = self._worker.call("step", self._handle, action)
        return self.last

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._worker.call("close", self._handle)


class ProcessGames:
    """``source``'s games, played in ``workers`` processes that each build the source with
    ``factory`` (a picklable callable, e.g. a ``functools.partial`` of its class). Episodes
    go to the workers in turn. ``workers`` below 1 counts as 1. ``persistent``: the workers
    outlive a solve (:meth:`release`) until :meth:`close`."""

    def __init__(
        self,
        source: GameSource,
        factory: Callable[[], GameSource],
        workers: int,
        persistent: bool = False,
    ):
        self.games: list[GameInfo] = source.games
        self.by_id: dict[str, GameInfo] = source.by_id
        self.max_steps: int = source.max_steps
        self.step_cap: int = source.step_cap
        self.parallelism = max(1, workers)
        self._factory = factory
        self._workers: list[_Worker] = []
        self.persistent = persistent
        self._lock = threading.Lock()
        self._opened = 0
        self._checked = False  # the workers' health checked since the last release

    def open(self, game: GameInfo, max_steps: int | None = None) -> RemoteEpisode:
        with self._lock:
            if not self._checked:  # a solve's first open: a persistent pool may have lost one
                self._checked = True
                if not all(w.proc.is_alive() for w in self._workers):
                    stale, self._workers = self._workers, []
                    _stop(stale)
            if not self._workers:
                # from a thread that outlives this solve's (see child_process.spawner)
                self._workers = spawner().submit(self._start).result()
            handle = self._opened
            self._opened += 1
            lane = handle % len(self._workers)
            worker = self._workers[lane]
        opened = worker.call("open", handle, (game.game_id, max_steps))
        return RemoteEpisode(worker, lane, handle, game, opened)

    def _start(self) -> list[_Worker]:
        # spawn: the grader holds torch's threads, which a fork would copy mid-state
        ctx = mp.get_context("spawn")
        return [_Worker(ctx, self._factory) for _ in range(self.parallelism)]

    def release(self) -> None:
        """The end of a solve (its episodes closed): stop the workers, unless the pool is
        persistent and every worker is alive. A later :meth:`open` starts new ones.
        Idempotent."""
        with self._lock:
            self._checked = False
            keep = self.persistent and all(w.proc.is_alive() for w in self._workers)
        if not keep:
            self.close()

    def close(self) -> None:
        """Stop the workers, persistent or not (their episodes end with them). Idempotent."""
        with self._lock:
            workers, self._workers = self._workers, []
        _stop(workers)
