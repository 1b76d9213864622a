"""Stop signals: Ctrl-C, SIGTERM and SIGHUP stop a run between two pieces of work, not inside one.

- :func:`stop_signals` installs the handlers ``muzero-gym`` runs its commands under: SIGTERM
  (cluster schedulers, ``docker stop``) and SIGHUP (a closed terminal) raise :class:`Stopped`,
  a KeyboardInterrupt, where the main thread is, as Ctrl-C raises KeyboardInterrupt, so a run
  saves its checkpoint on the way out. A signal the process was started ignoring stays ignored:
  a run under ``nohup`` outlives its terminal.
- :func:`deferred_stops` marks work a stop must not cut in half: a checkpoint being written
  (:func:`muzero_gym.run_folder.atomic_write`), and one move, that is one batched search with its
  env steps (self-play, evaluation, matches, reanalyse). numba's compiled code calls back into
  Python (to box a returned array, to load compiled code), and an exception a signal handler
  raises inside such a callback does not unwind as a KeyboardInterrupt: numba reports it as
  ``SystemError: ... returned a result with an exception set``, or loses it. A stop that
  arrives during deferred work is raised when the work is done; a second stop during the same
  work is raised at once (a hung env can still be stopped).
- :func:`exit_status` and :func:`stop_name` say which signal stopped a run, also when Ray's
  waits turned :class:`Stopped` into a plain KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt:
    the run saves its checkpoint on the way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []  # the stop signals the handlers saw in this run, latest last
_deferral: dict = {"depth": 0, "pending": None}


def stops_deferred() -> bool:
    """Whether work that a stop must not interrupt is running (see :func:`deferred_stops`)."""
    return _deferral["depth"] > 0


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
    """Work inside (a ``with`` block, or a function decorated with ``@deferred_stops()``) runs
    to its end; a stop that arrives meanwhile is raised afterwards. Only the main thread's work
    is guarded: Python runs signal handlers there alone, so no stop can interrupt another
    thread's (nor be raised in it). Work that ends in an exception raises that exception, and
    the stop deferred meanwhile is dropped with it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferral["depth"] += 1
    try:
        yield
    except BaseException:
        if _deferral["depth"] == 1:
            _deferral["pending"] = None
        raise
    finally:
        _deferral["depth"] -= 1
    pending = _deferral["pending"]
    if _deferral["depth"] == 0 and pending is not None:
        _deferral["pending"] = None
        raise pending


def _handle(signum: int, frame: object) -> None:
    _received.append(signum)
    interrupt = KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)
    if stops_deferred() and _deferral["pending"] is None:
        _deferral["pending"] = interrupt  # raised once the work is done
        return
    _deferral["pending"] = None
    raise interrupt


_STOP_SIGNALS = tuple(name for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP handled as the module doc says while the block runs; the
    handlers before it are put back after it."""
    names = [s for s in _STOP_SIGNALS
             if signal.getsignal(getattr(signal, s)) not in (signal.SIG_IGN, None)]
    _received.clear()
    previous = {name: signal.signal(getattr(signal, name), _handle) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


@contextlib.contextmanager
def stop_handlers_kept() -> Iterator[None]:
    """Puts back, after the block, the stop signals' handlers a library call in it replaced
    (``ray.init`` installs a Python one that exits and a native one that aborts): a run stopped
    by a signal still checkpoints and says how to resume. Outside the main thread, where no
    handler can be set, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {name: signal.getsignal(getattr(signal, name)) for name in _STOP_SIGNALS}
    try:
        yield
    finally:
        for name, handler in before.items():
            if handler is not None:  # None: not set from Python; nothing to put back
                signal.signal(getattr(signal, name), handler)


def _signal_of(stop: KeyboardInterrupt) -> int:
    """The signal that stopped the run. Ray's waits turn :class:`Stopped` into a plain
    KeyboardInterrupt, so what the handler saw says which signal it was."""
    if isinstance(stop, Stopped):
        return stop.signum
    return _received[-1] if _received else signal.SIGINT


def exit_status(stop: KeyboardInterrupt) -> int:
    """128 + the number of the signal that stopped the run (130 for Ctrl-C)."""
    return 128 + _signal_of(stop)


def stop_name(stop: KeyboardInterrupt) -> str:
    """``Ctrl-C``, ``SIGTERM`` or ``SIGHUP``: what stopped the run."""
    signum = _signal_of(stop)
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
