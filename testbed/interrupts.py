"""Ctrl-C where work runs in threads or child processes: SIGINT handlers that act before (or
instead of) Python's KeyboardInterrupt.

Python raises KeyboardInterrupt in the main thread only, wherever it happens to be. Where that
thread waits on the threads of a library (Flower's simulation engine), raising there tears the
waiting side down first and leaves the threads running, which then keep the process from exiting:
inside `deferred_interrupts` a SIGINT calls ``on_interrupt`` (set a stop flag) and raises nothing;
the block winds down by itself and its caller raises KeyboardInterrupt once it has. Where the
main thread waits on child processes (a sweep's variants), `interrupt_hook` calls ``on_interrupt``
(pass the signal on to them) before raising as usual.

Outside the main thread (which alone receives signals) and where SIGINT is ignored, both change
nothing. A KeyboardInterrupt raised in a `deferred_interrupts` block some other way also calls
``on_interrupt``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def deferred_interrupts(on_interrupt: Callable[[], None]) -> Iterator[None]:
    """While the block runs, each SIGINT calls ``on_interrupt()`` and raises nothing."""
    with _sigint_handler(on_interrupt, then_raise=False):
        yield


@contextmanager
def interrupt_hook(on_interrupt: Callable[[], None]) -> Iterator[None]:
    """While the block runs, each SIGINT calls ``on_interrupt()``, then raises KeyboardInterrupt."""
    with _sigint_handler(on_interrupt, then_raise=True):
        yield


@contextmanager
def _sigint_handler(on_interrupt: Callable[[], None], then_raise: bool) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        on_interrupt()
        if then_raise:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    except KeyboardInterrupt:
        if not then_raise:
            on_interrupt()
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)  # None: not set from Python
