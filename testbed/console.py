"""Keep libraries' chatter off the console: it goes to the run folder's ``log.txt`` unless ``--verbose``.

Ray prints its workers' output on the driver (Flower's ``ClientAppActor ... Manually terminating``
warnings come that way), and Flower, MLflow, opacus and torch log or warn in this process. While
`library_output` is active, all of it is appended to ``<run>/log.txt``: the console shows the
testbed's own lines and progress bars, and the log keeps what a person debugging needs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOG_NAME = "log.txt"
# Loggers of the libraries a run drives; py.warnings is where `logging.captureWarnings` sends warnings.
LIBRARY_LOGGERS = ("flwr", "ray", "mlflow", "alembic", "sqlalchemy", "huey", "wandb", "opacus", "torch", "py.warnings")
# Loggers whose INFO is not for a person reading a run's log: SQLAlchemy's INFO is its echo of
# mapper set-up and statements (Flower's link state: ~250 lines a federated run), alembic's too.
LIBRARY_FLOORS = {"sqlalchemy": logging.WARNING, "alembic": logging.WARNING}
RAY_HANDLER = "ray_print_logs"  # the name under which ray.init registers its console printer

_active: dict[str, Any] = {}


@contextmanager
def library_output(run_path: Path, verbose: bool) -> Iterator[None]:
    """Within: library logs, warnings and Ray workers' output are appended to ``run_path/log.txt``
    (``verbose``: left on the console, as the libraries print them)."""
    if verbose:
        yield
        return
    # MLflow, imported later in the run, would put its own console handler back on its loggers.
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    handler = logging.FileHandler(run_path / LOG_NAME, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = {name: _divert(logging.getLogger(name), handler) for name in LIBRARY_LOGGERS}
    _active["handler"] = handler
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        _active.clear()
        for name, state in saved.items():
            _restore(logging.getLogger(name), state)
        handler.close()


def _divert(logger: logging.Logger, handler: logging.Handler) -> tuple[list[logging.Handler], bool, int]:
    state = (list(logger.handlers), logger.propagate, logger.level)
    logger.handlers = [handler]
    logger.propagate = False  # not also to the root logger's console handler
    # The log is read after the fact: keep what a library says at INFO, unless it asked for less
    # itself (torch: WARNING; its INFO, e.g. "compile_threads set to 2" on torch.optim's first use,
    # comes from its own logging system, which adds a console handler below this logger).
    logger.setLevel(max(LIBRARY_FLOORS.get(logger.name, logging.INFO), logger.level))
    return state


def _restore(logger: logging.Logger, state: tuple[list[logging.Handler], bool, int]) -> None:
    logger.handlers, logger.propagate = state[0], state[1]
    logger.setLevel(state[2])


def divert_ray_workers() -> None:
    """Called after ``ray.init``: Ray workers' printed lines go to the active log instead of the console.

    Ray offers no public hook for this; its dispatcher of worker output is private, so where it has
    moved (another Ray version) the lines stay on the console rather than failing the run.
    """
    handler = _active.get("handler")
    if handler is None:
        return
    try:
        from ray._private.worker import filter_autoscaler_events
        from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return
    dispatcher.remove_handler(RAY_HANDLER)  # ray.init's printer (absent when log_to_driver is off)
    dispatcher.add_handler(RAY_HANDLER, _WorkerLines(handler, filter_autoscaler_events))


class _WorkerLines:
    """Writes one batch of a Ray worker's output (``{"lines": [...], "pid": ..., ...}``) to the log."""

    def __init__(self, handler: logging.Handler, autoscaler_events: Callable[[list[str]], Iterable[str]]):
        self.handler = handler
        self.autoscaler_events = autoscaler_events

    def __call__(self, data: dict[str, Any]) -> None:
        if _active.get("handler") is not self.handler:
            return  # a line after its run ended: the log is closed (a failed run's folder may be gone)
        source = data.get("actor_name") or data.get("task_name") or f"pid={data.get('pid')}"
        lines = data.get("lines", [])
        if data.get("pid") == "autoscaler":  # its status every few seconds: only its events, as Ray prints
            try:
                lines = list(self.autoscaler_events(lines))
            except Exception:  # Ray's filter asks its control store, gone while Ray shuts down: drop them
                lines = []
        for line in lines:
            self.handler.emit(logging.makeLogRecord({"name": f"ray.worker({source})", "levelname": "OUTPUT",
                                                     "msg": line}))
