"""Prepared corpus folders kept across runs, under a key of everything that determines their bytes.

Preparing a text corpus (the BPE tokenizer, the token stores, the packing) takes seconds to minutes
and gives the same bytes for the same inputs, so `testbed.pretrain.prepare.prepare_corpus` keeps
each folder it builds under ``CACHE/<key>/``, and a later run with the same key copies that folder's
files into its own run folder instead of preparing them again. The run folder owns its corpus:
its files are copies (reflinks where the file system offers them: shared blocks, copied on write),
never hard links to the cache's, in either direction, so altering a cache entry never alters a
finished run, and ``testbed resume`` and the report work after the cache is deleted, which is
always safe.

The key is a SHA-256 of:
  - the fields of the ``pretrain:`` block that the preparation reads (`PREPARATION_FIELDS`). The
    preparation is handed a config that holds only these (`preparation_config`), so a field it
    comes to read without being added here stays at its default instead of feeding one
    configuration's tokens to another;
  - the seed (the preparation's random streams are named under it: `testbed.seeding`);
  - the preparing code: the source of every testbed module that `testbed.pretrain.prepare` imports,
    directly or not (found by reading the imports, so a new module counts without a list to keep
    up to date), and the versions of Python, numpy and tokenizers. There is no version constant to
    forget to bump: any edit of that code is a new key, and costs one preparation;
  - the source documents: the standard library's file names, sizes and modification times for the
    stdlib sources, every file's contents for a folder corpus (the generated sources have no inputs
    beyond the config).

Where: ``$TESTBED_CACHE_DIR/corpora``, else ``$XDG_CACHE_HOME/testbed/corpora``, else
``~/.cache/testbed/corpora``. ``TESTBED_CORPUS_CACHE=off`` (or ``0``, ``false``, ``no``) turns the
cache off, for one command (``TESTBED_CORPUS_CACHE=off testbed run ...``) or for a shell; the result
of a run is the same either way, so the switch is the environment's, not the scenario's. The tests
keep their own cache folder (tests/conftest.py).

Filling: the files of a freshly built folder are copied into a new temporary folder beside the
entries, with ``cache.json`` (each file's size and SHA-256), made read-only, and the folder is
renamed to its key in one step. Of two runs filling one key at once, the second keeps the first's
entry (the same bytes) and drops its own. A cache folder the system refuses (read-only, full) is
skipped, never fatal.

Reading: an entry's files are copied into the run's folder and checked there against
``cache.json``: the exact set of plain files (no links, no folders), their sizes and hashes, and
arrays without Python objects. On any mismatch the run prepares the corpus itself and replaces the
entry. Nothing from the cache is code: the token stores and packings load through numpy without
pickles, the tokenizer, manifest and listing are JSON. The hashes catch damaged or altered files,
not a consistent forgery of files and listing by someone who can write the cache folder (who could
as well edit the user's shell start-up files).

The run's own record: whichever way its corpus came (built or from the cache), the run's corpus
folder keeps each file's size and SHA-256 in ``digests.json`` (`record_digests`), written before
the folder is renamed into place, and ``testbed resume`` checks the files against it before
anything runs (`check_digests`): an altered file is one line naming it. Hashing reads the corpus
once per resume: 1.2 s for 500 MB (from the page cache, one core of the development machine), so a
multi-hundred-MB corpus costs a second or two per resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from testbed.cache import cache_root as shared_cache_root
from testbed.errors import UserError
from testbed.imports import imported_modules
from testbed.pretrain.config import CorpusConfig, PretrainConfig
from testbed.pretrain.corpus import corpus_files, stdlib_files, stdlib_root

try:
    import fcntl
except ImportError:  # not POSIX: no reflinks, files are copied
    fcntl = None  # type: ignore[assignment]

SWITCH_ENV = "TESTBED_CORPUS_CACHE"
# The pretrain fields the preparation reads: the documents, the tokenizer, and both packings.
PREPARATION_FIELDS = ("corpus", "tokenizer", "context_length", "packing", "eval_documents")
PREPARING_MODULE = "testbed.pretrain.prepare"
LISTING = "cache.json"
DIGESTS = "digests.json"  # the run's own record of its corpus files (`record_digests`)
FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int): make the target share the source's blocks
MAX_LISTING_BYTES = 1 << 20
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


def cache_root() -> Path | None:
    """The folder of cached corpora, or None when ``TESTBED_CORPUS_CACHE`` turns the cache off."""
    return shared_cache_root("corpora", SWITCH_ENV)


def preparation_config(config: PretrainConfig) -> PretrainConfig:
    """``config`` with only the fields of the key; every other field at its default."""
    return PretrainConfig(**{name: getattr(config, name) for name in PREPARATION_FIELDS})


def cache_entry(config: PretrainConfig, seed: int) -> Path | None:
    """The cache folder of the corpus that ``config`` and ``seed`` prepare; None with the cache off."""
    root = cache_root()
    key = corpus_key(config, seed) if root is not None else None
    return None if root is None or key is None else root / key


def corpus_key(config: PretrainConfig, seed: int) -> str | None:
    """The cache key of the corpus that ``config`` and ``seed`` prepare (None when the preparing
    code's source cannot be read, which leaves the cache unused)."""
    import tokenizers

    code = code_digest()
    if code is None:
        return None
    inputs = {
        "config": config.model_dump(mode="json", include=set(PREPARATION_FIELDS)),
        "seed": int(seed),
        "code": code,
        "versions": [sys.version, np.__version__, tokenizers.__version__],
        "documents": documents_digest(config.corpus),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


@cache
def code_digest() -> str | None:
    """A hash of the source of the preparing modules (`preparing_modules`); None where one has no
    readable source."""
    modules = preparing_modules()
    if modules is None:
        return None
    return hashlib.sha256(json.dumps(sorted((name, _sha256(path)) for name, path in modules.items())).encode()
                          ).hexdigest()


def preparing_modules() -> dict[str, Path] | None:
    """`PREPARING_MODULE` and every testbed module it imports, directly or not (imports inside
    functions included), with their source files; None where a module has no ``.py`` source."""
    return imported_modules(PREPARING_MODULE)


def documents_digest(corpus: CorpusConfig) -> str:
    """A hash of what the corpus's documents are read from: the standard library's listing (names,
    sizes, modification times), a folder corpus's file contents, nothing for generated sources."""
    entries: list[Any] = []
    if corpus.source in ("stdlib_code", "stdlib_docs"):
        root = stdlib_root()
        entries.append(str(root))
        for path in stdlib_files(corpus.source == "stdlib_code"):  # the files the source reads (listed once)
            status = path.stat()
            entries.append((path.relative_to(root).as_posix(), status.st_size, status.st_mtime_ns))
    elif corpus.source == "folder":
        assert corpus.path is not None  # the corpus check requires a path for source 'folder'
        folder = Path(corpus.path)
        entries.extend((path.relative_to(folder).as_posix(), _sha256(path)) for path in corpus_files(folder))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def fetch(entry: Path, folder: Path) -> dict[str, dict[str, Any]] | None:
    """Copy the cache entry ``entry`` into the new folder ``folder`` and check it there; the files'
    sizes and hashes, or None, with ``folder`` removed, where the entry is missing or does not
    match its listing."""
    files = _read_listing(entry)
    if files is None:
        return None
    folder.mkdir(parents=True)
    try:
        for name in files:
            clone_file(entry / name, folder / name)
        if _intact(folder, files):
            return files
    except OSError:  # removed by a run replacing a damaged entry, or unreadable
        pass
    shutil.rmtree(folder, ignore_errors=True)
    return None


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """The size and SHA-256 of every file of ``folder`` (a ValueError for anything but plain files)."""
    return {path.name: _describe(path) for path in sorted(folder.iterdir())}


def record_digests(folder: Path, files: dict[str, dict[str, Any]]) -> None:
    """Keep ``files`` (`describe_files` of ``folder``, or the cache listing it was checked against)
    in ``folder``'s `DIGESTS`, the record `check_digests` holds the run's corpus to."""
    (folder / DIGESTS).write_text(json.dumps({"files": files}, indent=1))


def check_digests(folder: Path) -> None:
    """Refuse, in one line naming the file, a run's corpus folder whose files are not those
    `record_digests` recorded when the run wrote it (missing, not plain files, other bytes)."""
    redo = f"delete {folder} to have 'testbed resume' prepare the corpus again"
    files = _read_listing(folder, DIGESTS)
    if files is None:
        raise UserError(f"{folder / DIGESTS}: missing or malformed, so the run's corpus cannot be checked "
                        f"(a folder written before runs recorded its digests, or altered); {redo}")
    for name, recorded in sorted(files.items()):
        try:
            found: dict[str, Any] | None = _describe(folder / name)
        except (OSError, ValueError):  # gone, or replaced by a link, folder or FIFO
            found = None
        if found != recorded:
            now = "missing or not a plain file" if found is None else f"now SHA-256 {found['sha256'][:16]}..."
            raise UserError(f"{folder / name}: the corpus file is not the one the run wrote (recorded SHA-256 "
                            f"{recorded['sha256'][:16]}..., {now}); {redo}")


def publish(entry: Path, built: Path, files: dict[str, dict[str, Any]]) -> None:
    """Keep the files of the complete corpus folder ``built`` (described by ``files``) as the cache
    entry ``entry``: copied into a temporary folder, which is renamed into place; a cache folder
    the system refuses is left alone."""
    staging = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
        for name in files:
            clone_file(built / name, staging / name)
            os.chmod(staging / name, 0o444)  # an accidental write fails loudly instead of altering the entry
        (staging / LISTING).write_text(json.dumps({"files": files}, indent=1))
        os.chmod(staging, 0o755)
        if _install(staging, entry):
            staging = None
    except (OSError, ValueError):  # no room, no permission, or a built folder with more than files
        pass
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _install(staging: Path, entry: Path) -> bool:
    """Rename ``staging`` to ``entry``; where ``entry`` exists, keep it if intact (another run filled
    it first), else move it aside and try again. True when ``staging`` became the entry."""
    for _ in range(3):
        try:
            os.rename(staging, entry)
            return True
        except OSError:
            files = _read_listing(entry)
            if files is not None and _intact(entry, files, extra=LISTING):
                return False
            _discard(entry)
    return False


def _discard(entry: Path) -> None:
    aside = entry.with_name(f".{entry.name}.{uuid.uuid4().hex}.old")
    try:
        os.rename(entry, aside)
    except OSError:  # gone already (another run moved it), or not ours to move
        return
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def _read_listing(entry: Path, listing: str = LISTING) -> dict[str, dict[str, Any]] | None:
    """The files that ``entry``'s ``listing`` names, or None where the entry or its listing is
    missing, not a plain folder and file, or malformed."""
    try:
        if not stat.S_ISDIR(os.lstat(entry).st_mode):
            return None
        status = os.lstat(entry / listing)
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_LISTING_BYTES:
            return None
        files = json.loads((entry / listing).read_bytes())["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not isinstance(files, dict) or "manifest.json" not in files:
        return None
    for name, description in files.items():
        if not _FILE_NAME.match(name) or name in (LISTING, DIGESTS) or not isinstance(description, dict) \
                or set(description) != {"bytes", "sha256"} or type(description["bytes"]) is not int \
                or not isinstance(description["sha256"], str):
            return None
    return files


def _intact(folder: Path, files: dict[str, dict[str, Any]], extra: str | None = None) -> bool:
    """Whether ``folder`` holds exactly ``files`` (and ``extra``), as plain files of their sizes and
    hashes, its arrays without Python objects."""
    try:
        if set(os.listdir(folder)) != set(files) | ({extra} if extra else set()):
            return False
        arrays = [name for name in files if name.endswith(".npy")]
        return all(_describe(folder / name) == description for name, description in files.items()) \
            and all(_plain_array(folder / name) for name in arrays)
    except (OSError, ValueError):
        return False


def _plain_array(path: Path) -> bool:
    """Whether the ``.npy`` file at ``path`` holds no Python objects (which only a pickle could load)."""
    headers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with open(path, "rb") as handle:
        read_header = headers.get(np.lib.format.read_magic(handle))
        return read_header is not None and not read_header(handle)[2].hasobject


def _describe(path: Path) -> dict[str, Any]:
    status = os.lstat(path)
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{path} is not a plain file")
    return {"bytes": status.st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def clone_file(source: Path, target: Path) -> None:
    """Copy the plain file ``source`` to the new file ``target``: a reflink where the file system
    offers one (btrfs, XFS: the blocks are shared until either file is written), else the bytes.
    Never a hard link: the two names must stay two files, so writing one leaves the other as it was."""
    with open(source, "rb", opener=_open_no_follow) as src, open(target, "xb") as dst:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise OSError(f"{source} is not a plain file")
        try:
            if fcntl is None:
                raise OSError("no ioctl")
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:  # no reflinks here (ext4, tmpfs, across file systems): copy the bytes
            shutil.copyfileobj(src, dst, 1 << 20)


def _open_no_follow(path: str, flags: int) -> int:
    # O_NONBLOCK: a FIFO in place of a file opens at once (and is then refused) instead of waiting for a writer
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
