"""Stops every running cluster when the process ends: at exit and on SIGTERM or SIGHUP.

Why: a test run that is interrupted or killed politely must not leave a control plane behind.
pytest's fixture finalizers cover failures and Ctrl-C (KeyboardInterrupt); `atexit` covers a
normal exit of anything else; SIGTERM and SIGHUP would otherwise end Python without running
either, so they get a handler that stops the clusters and then lets the signal take its course.
(A SIGKILLed process cannot clean up: there the components' parent-death signal stops them.)
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from types import FrameType
from typing import Protocol


class Stoppable(Protocol):
    def stop(self, keep_logs: bool = False) -> None: ...


_running: list[Stoppable] = []
_lock = threading.Lock()
_installed = False
_previous_handlers: dict[int, object] = {}


def register(cluster: Stoppable) -> None:
    with _lock:
        _running.append(cluster)
    _install_once()


def unregister(cluster: Stoppable) -> None:
    with _lock:
        if cluster in _running:
            _running.remove(cluster)


def stop_all() -> None:
    """Stops every registered cluster (newest first)."""
    while True:
        with _lock:
            if not _running:
                return
            cluster = _running.pop()
        cluster.stop()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    stop_all()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_once() -> None:
    global _installed  # noqa: PLW0603 - one process-wide installation
    with _lock:
        if _installed:
            return
        _installed = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    for signum in (signal.SIGTERM, signal.SIGHUP):
        _previous_handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, _on_signal)
