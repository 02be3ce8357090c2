"""Where the testbed keeps what it can rebuild, and how it keeps arrays there.

One base folder: ``$TESTBED_CACHE_DIR``, else ``$XDG_CACHE_HOME/testbed``, else ``~/.cache/testbed``,
with one sub-folder per cache (prepared corpora, dataset labels, stratified splits' indices,
generated datasets, the decentralized check's privacy accountants) and one
environment switch per cache (``off``, ``0``, ``false`` or ``no`` turns it off for one command or a
shell: the result of a run is the same either way, so the switch is the environment's, not the
scenario's). The tests keep their own base folder (tests/conftest.py).

`read_arrays` and `write_arrays` keep a set of numpy arrays in one ``.npz`` entry: written to a
temporary file and renamed into place (a reader sees all of an entry or none), read without pickles
and checked against the dtypes and shapes the caller expects, so a damaged or foreign entry is
rebuilt, never used. Arrays read from the cache are only ever held in memory; nothing here is
linked into a run folder (a corpus, which is, is copied: `testbed.pretrain.corpus_cache`). A cache
folder the system refuses (read-only, full) costs the next process the rebuild, never the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

import numpy as np

CACHE_DIR_ENV = "TESTBED_CACHE_DIR"
SWITCH_OFF = frozenset({"0", "off", "false", "no"})


def cache_root(name: str, switch_env: str) -> Path | None:
    """The folder of the cache ``name``, or None when the environment variable ``switch_env`` turns it off."""
    if os.environ.get(switch_env, "").strip().lower() in SWITCH_OFF:
        return None
    if os.environ.get(CACHE_DIR_ENV):
        base = Path(os.environ[CACHE_DIR_ENV])
    elif os.environ.get("XDG_CACHE_HOME"):
        base = Path(os.environ["XDG_CACHE_HOME"]) / "testbed"
    else:
        base = Path.home() / ".cache" / "testbed"
    return base / name


def source_digest(sources: Iterable[Path], libraries: Iterable[str]) -> str:
    """A SHA-256 of the code that makes an entry: the files' names and bytes, and the installed
    versions of the libraries whose output it depends on (an edit or an upgrade is a new key)."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for name in libraries:
        try:
            digest.update(f"{name}=={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} absent".encode())
    return digest.hexdigest()


def read_arrays(path: Path, expected: Mapping[str, tuple[str, tuple[int, ...] | None]]) -> dict[str, np.ndarray] | None:
    """The arrays of the entry at ``path`` when it holds exactly the names of ``expected``, each of
    its dtype and (where given) shape; None when it is absent, damaged or not what was expected."""
    try:
        with np.load(path, allow_pickle=False) as entry:
            if sorted(entry.files) != sorted(expected):
                return None
            arrays = {name: entry[name] for name in expected}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None
    for name, (dtype, shape) in expected.items():
        if arrays[name].dtype != np.dtype(dtype) or (shape is not None and arrays[name].shape != shape):
            return None
    return arrays


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Keep ``arrays`` at ``path``: written beside it and renamed into place, so a reader sees all of
    the entry or none (no fsync: an entry cut short by a crash fails `read_arrays` and is rebuilt).
    A folder that cannot be written is skipped."""
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
