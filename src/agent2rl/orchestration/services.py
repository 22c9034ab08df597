"""The run's services under one lifecycle: started in order, stopped in reverse, always.

A run starts a dozen things around its agent (docs/development.md lists them in order), each
a :class:`Service` on one :class:`RunServices` (a :class:`contextlib.ExitStack`), so that:

- adding a service is one :meth:`RunServices.start` (or :meth:`~RunServices.launch` for a
  function that starts one and returns its handle) where the run needs it;
- on every exit path (normal end, an exception, SIGTERM or Ctrl-C as ``KeyboardInterrupt``)
  :meth:`RunServices.close` stops every service started, or whose start began, last first; a
  failing stop is reported and the others still run;
- a service that cannot become ready raises :class:`ServiceNotReady` naming it (the run ends
  as an infrastructure failure) once the same close stopped the services before it.

A step that must run at its place in the stop order (the network record once the proxies are
down; the in-flight submissions and the report once the grading service is down, before the
guard goes) is a :meth:`RunServices.callback`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, Generic, Protocol, TypeVar

from agent2rl.errors import UserError
from agent2rl.orchestration.guard import HARNESS_MARK_ENV, RunGuard

T = TypeVar("T")
S = TypeVar("S", bound="Service")


class Service(Protocol):
    """One part of a run, started before it is used and stopped when the run ends. ``start``
    returns once ready, raises when it cannot become ready and then leaves nothing running
    (or :meth:`stop` cleans up what it left). ``stop`` is idempotent and safe on a service
    whose ``start`` failed, was interrupted or never ran."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ServiceNotReady(RuntimeError):
    """A run's service could not be started or did not become ready: an infrastructure
    failure of the run, not the agent's. ``service`` is its name; the error is its cause."""

    def __init__(self, service: str, cause: BaseException) -> None:
        super().__init__(f"infrastructure failure: the {service} did not become ready: {cause}")
        self.service = service


class Launched(Generic[T]):
    """A service from a function that starts it and returns a handle once it is ready
    (:func:`~agent2rl.grading.service.start_service`, a metering proxy, an egress proxy...),
    stopped by ``stop(handle)``. :attr:`handle` is None before the start and after the stop."""

    def __init__(self, name: str, start: Callable[[], T], stop: Callable[[T], Any]) -> None:
        self.name = name
        self.handle: T | None = None
        self._start, self._stop = start, stop

    def start(self) -> None:
        self.handle = self._start()

    def stop(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            self._stop(handle)


class Named:
    """An object that starts and stops itself (a recorder's thread, the service bridge), under
    a name for logs and errors. ``part.stop()`` must be idempotent."""

    def __init__(self, name: str, part: Any) -> None:
        self.name, self.part = name, part

    def start(self) -> None:
        self.part.start()

    def stop(self) -> None:
        self.part.stop()


class GuardService:
    """The run's guard (:mod:`~agent2rl.orchestration.guard`) as a service: while it runs,
    every process this one starts inherits the harness mark by which the guard finds it if
    this process is SIGKILLed; its stop restores the environment and closes the guard (which
    sweeps whatever is left). The first service a run starts, so the last one stopped."""

    name = "run guard"

    def __init__(self, run_dir: Any, log_path: Any) -> None:
        self.run_dir, self.log_path = run_dir, log_path
        self.guard: RunGuard | None = None
        self._old_mark: str | None = None

    def start(self) -> None:
        self._old_mark = os.environ.get(HARNESS_MARK_ENV)
        self.guard = RunGuard.start(self.run_dir, self.log_path)
        os.environ[HARNESS_MARK_ENV] = self.guard.harness_mark

    def stop(self) -> None:
        if self._old_mark is None:
            os.environ.pop(HARNESS_MARK_ENV, None)
        else:
            os.environ[HARNESS_MARK_ENV] = self._old_mark
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.close()


class RunServices:
    """One run's services (see the module docstring). ``warn`` gets one line for each stop or
    step that failed; :attr:`started` and :attr:`stopped` name the services started and stopped
    so far, in order. Not thread-safe: the run's main thread starts and closes it."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self._stack = ExitStack()
        self._warn = warn or (lambda line: None)
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, service: S) -> S:
        """Start ``service``, return it once ready; :meth:`close` stops it. Its stop is
        registered *before* its start, so a start cut short (interrupted, or failed after
        spawning a process) is stopped too. A :class:`UserError` or an interruption passes
        through; any other error becomes :class:`ServiceNotReady` naming the service."""
        self._stack.callback(self._stop, service)
        try:
            service.start()
        except (UserError, ServiceNotReady):
            raise
        except Exception as err:
            raise ServiceNotReady(service.name, err) from err
        self.started.append(service.name)
        return service

    def launch(self, name: str, start: Callable[[], T], stop: Callable[[T], Any]) -> T:
        """:meth:`start` a :class:`Launched` service; returns its handle."""
        handle = self.start(Launched(name, start, stop)).handle
        assert handle is not None
        return handle

    def callback(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at this point of the stop order (after everything registered
        later is stopped, before everything registered earlier). ``what`` names the step
        (``"writing the report"``) in a warning if it fails and in :attr:`stopped`."""
        self._stack.callback(self._step, what, fn, args)

    def close(self) -> None:
        """Stop everything, last started first; idempotent."""
        self._stack.close()

    def __enter__(self) -> RunServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stop(self, service: Service) -> None:
        self._step(f"stopping the {service.name}", service.stop, ())
        self.stopped[-1] = service.name

    def _step(self, what: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        # A failing stop must not keep the services before it running, nor the report from
        # being written: it is reported and the close goes on.
        try:
            fn(*args)
        except Exception as err:
            self._warn(f"{what} failed: {type(err).__name__}: {err}")
        self.stopped.append(what)
