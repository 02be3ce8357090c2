"""One root seed for every random generator of a run.

Streams are derived by *name* rather than by spawn order (``SeedTree(7).numpy("data.split")``), so
adding a new consumer of randomness never shifts the numbers another consumer sees. Each name is
hashed into numpy's ``SeedSequence`` spawn key, which gives statistically independent streams.

Every stream a run draws is declared once, with its purpose, by the module that draws it::

    ORDER = stream("pretrain.order/epoch.{}", "the order in which an epoch's training sequences are drawn")

A declaration names the stream's *path*: the names of the children it sits under and its own name,
joined by ``/``; ``{}`` stands for one field (a client id, a round) and a final ``*`` for anything
below a namespace whose owner names its streams itself (a workload's). Declaring one path for two
purposes fails at import. A run's tree (``SeedTree(seed, strict=True)``, the `RunContext`'s)
records which declaration drew each path, refuses a path no declaration claims and a path two
declarations claim: two purposes never share a stream unnoticed. Declarations change no number:
the draw is still keyed by the name alone.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


class StreamError(ValueError):
    """A seed stream declared or drawn inconsistently (a programming error, not a user error)."""


@dataclass(frozen=True)
class Stream:
    """One declared random stream: its path in the seed tree and what it is drawn for."""

    path: str
    purpose: str
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A field is one name segment (never a dot or a slash); "*" ends a namespace left to its owner.
        parts = [re.escape(part) for part in self.path.split("{}")]
        regex = "[^./]+".join(parts)
        if self.path.endswith("/*"):
            regex = regex[: -len(re.escape("*"))] + ".+"
        object.__setattr__(self, "pattern", re.compile(regex))

    def claims(self, path: str) -> bool:
        return self.pattern.fullmatch(path) is not None


class StreamRegistry:
    """The declared streams (`STREAMS` holds the project's; a test may keep its own)."""

    def __init__(self) -> None:
        self._streams: dict[str, Stream] = {}
        self._claims: dict[str, Stream | None] = {}  # path -> its declaration, memoised per drawn path

    def declare(self, path: str, purpose: str) -> Stream:
        known = self._streams.get(path)
        if known is not None and known.purpose != purpose:
            raise StreamError(f"seed stream {path!r} is declared twice: for {known.purpose!r} and for {purpose!r}; "
                              "give one of them another name")
        self._claims.clear()  # a new declaration may claim a path already looked up
        return self._streams.setdefault(path, Stream(path, purpose))

    def declared(self) -> list[Stream]:
        return list(self._streams.values())

    def claim(self, path: str) -> Stream | None:
        """The one declaration that claims ``path`` (None if none does)."""
        if path not in self._claims:
            owners = [s for s in self._streams.values() if s.claims(path)]
            if len(owners) > 1:
                raise StreamError(f"seed stream {path!r} is claimed for two purposes: "
                                  + " and ".join(f"{s.purpose!r} ({s.path})" for s in owners))
            self._claims[path] = owners[0] if owners else None
        return self._claims[path]


STREAMS = StreamRegistry()


def stream(path: str, purpose: str) -> Stream:
    """Declare the stream at ``path`` (see the module docstring) in the project's registry."""
    return STREAMS.declare(path, purpose)


class _Ledger:
    """Which declaration drew each path of one run (shared by a tree and all its children)."""

    def __init__(self, strict: bool, registry: StreamRegistry | None) -> None:
        self.strict = strict
        self.registry = registry  # None: the project's `STREAMS` (so that a pickled tree finds it again)
        self.drawn: dict[str, Stream | None] = {}

    def record(self, path: str) -> None:
        owner = (self.registry or STREAMS).claim(path)
        if owner is None and self.strict:
            raise StreamError(f"seed stream {path!r} is drawn but not declared: declare it once, with its purpose, "
                              "with testbed.seeding.stream()")
        if path in self.drawn and self.drawn[path] != owner:  # equal, not identical: a tree may be unpickled
            raise StreamError(f"seed stream {path!r} was drawn for {_purpose(self.drawn[path])!r} and now for "
                              f"{_purpose(owner)!r} in one run")
        self.drawn[path] = owner


def _purpose(declaration: Stream | None) -> str:
    return declaration.purpose if declaration is not None else "an undeclared use"


def _name_key(name: str) -> tuple[int, ...]:
    digest = hashlib.sha256(name.encode()).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


class SeedTree:
    """Derives independent, reproducible random streams from one root seed.

    ``strict=True`` (a run's tree) refuses a stream no declaration claims; every tree refuses one
    path drawn for two purposes (see the module docstring)."""

    def __init__(self, root: int, path: tuple[int, ...] = (), *, strict: bool = False,
                 registry: StreamRegistry | None = None):
        self.root = int(root)
        self._path = path
        self._names: tuple[str, ...] = ()
        self._ledger = _Ledger(strict, registry)

    def _below(self, name: str) -> str:
        return "/".join((*self._names, name))

    def child(self, name: str) -> SeedTree:
        """A sub-tree for one component, e.g. ``seeds.child("client.3")``."""
        tree = SeedTree.__new__(SeedTree)
        tree.root, tree._path, tree._ledger = self.root, self._path + _name_key(name), self._ledger
        tree._names = (*self._names, name)
        return tree

    def drawn(self) -> dict[str, str]:
        """Each path this tree (and its children) has drawn, with the purpose that drew it."""
        return {path: _purpose(owner) for path, owner in self._ledger.drawn.items()}

    def sequence(self, name: str) -> np.random.SeedSequence:
        """The numpy SeedSequence of stream ``name``."""
        self._ledger.record(self._below(name))
        return np.random.SeedSequence(self.root, spawn_key=self._path + _name_key(name))

    def numpy(self, name: str) -> np.random.Generator:
        """A numpy Generator for stream ``name``."""
        return np.random.default_rng(self.sequence(name))

    def integer(self, name: str) -> int:
        """A 31-bit integer seed for libraries that take an int (scikit-learn, torch.manual_seed)."""
        return int(self.sequence(name).generate_state(1)[0] & 0x7FFFFFFF)

    def torch(self, name: str) -> torch.Generator:
        """A CPU torch Generator for stream ``name``."""
        import torch  # here: validation declares streams and must not import torch

        generator = torch.Generator()
        generator.manual_seed(self.integer(name))
        return generator
