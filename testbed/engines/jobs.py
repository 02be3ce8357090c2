"""Training programs an engine launches (`Engine.launch`), and the handle of a running one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class DistributedProgram:
    """A torch.distributed program: ``python -m module *args`` on every rank.

    ``module`` must also offer ``main(argv) -> int``, which engines that start ranks as functions
    (Ray Train) call. ``work_dir`` receives the launcher's log and pid files; ``ranks`` is the
    count asked for where the engine has none of its own (`EngineSettings.ranks`).
    """

    module: str
    args: tuple[str, ...]
    work_dir: Path
    ranks: int = 1
    env: Mapping[str, str] = field(default_factory=dict)


class Job(ABC):
    """A running `DistributedProgram`."""

    @abstractmethod
    def finished(self) -> bool:
        """Whether every rank has exited."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every rank that still runs (idempotent)."""

    @abstractmethod
    def raise_for_status(self) -> None:
        """After `finished`: raise if the program failed."""
