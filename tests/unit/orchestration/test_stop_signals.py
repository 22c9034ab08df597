"""SIGTERM and SIGHUP end a run as Ctrl-C does, once; its stop path is not cut short by a
second signal; a signal ignored at the start (``nohup``) stays ignored."""

from __future__ import annotations

import os
import signal
import time

import pytest

from agent2rl.orchestration.run import RunInterrupted, _StopSignals


def _deliver(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary of the main thread


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_the_first_signal_interrupts_and_the_next_are_ignored(sig, capfd) -> None:
    # The suite may itself run under `nohup` or as a background job (SIGHUP, SIGINT
    # ignored, which _StopSignals rightly keeps): start from the default handler.
    started_as = signal.signal(
        sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
    )
    try:
        _interrupts_once(sig, capfd)
    finally:
        signal.signal(sig, started_as)


def _interrupts_once(sig: int, capfd) -> None:
    before = signal.getsignal(sig)
    with _StopSignals() as signals:
        with pytest.raises(RunInterrupted) as caught:
            _deliver(sig)
        assert isinstance(caught.value, KeyboardInterrupt) and caught.value.signum == sig
        _deliver(sig)  # the stop path goes on
        _deliver(signal.SIGTERM)
        assert signals.received == sig
    assert "already stopping" in capfd.readouterr().err
    assert signal.getsignal(sig) == before


def test_the_stop_path_is_not_interrupted() -> None:
    with _StopSignals() as signals:
        signals.stopping()
        _deliver(signal.SIGTERM)  # would raise if it interrupted
        assert signals.received is None


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _StopSignals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            _deliver(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)
