"""Documents for pretraining, from sources that work offline, and their train/held-out split.

Sources (``pretrain.corpus.source``):
  stdlib_code  every module of the Python standard library that runs this code, one file per document
               (a code corpus that ships with every Python);
  stdlib_docs  natural-language text from the same installation: the reference manual's topics
               (``pydoc_data.topics``) and the docstrings of modules, classes and functions;
  folder       a folder of ``.txt`` files (one document each) and ``.jsonl`` files (one document per
               line, text under ``text_field``), read in sorted path order;
  factrecall   the synthetic closed-domain corpus of `testbed.pretrain.factrecall`;
  bigram_backcopy  token documents of the attention-sink task (`testbed.pretrain.sink_task`), written
               by `testbed.pretrain.prepare` without a tokenizer (not a text source of this module).

Every source is a generator, so a corpus larger than memory streams through tokenization. The
standard-library sources visit files in an order drawn from the run's seed, so ``max_documents``
takes an unbiased sample rather than the alphabetically first modules.
"""

from __future__ import annotations

import ast
import json
import os
import sysconfig
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import numpy as np

from testbed.errors import ScenarioError, shorten
from testbed.pretrain.config import CorpusConfig
from testbed.pretrain.factrecall import FactRecallDocument, generate_documents
from testbed.seeding import SeedTree, stream

ORDER = stream("corpus.order", "the order in which a standard-library source visits its files")
# One purpose for every source: the bigram_backcopy preparation splits its token documents with it too.
HELDOUT = stream("corpus.heldout", "which documents of the corpus are held out for evaluation")
FACTRECALL = stream("corpus.factrecall", "the facts and questions of the factrecall documents")

MIN_DOCSTRING_CHARS = 200  # shorter docstrings are mostly one-line summaries
TEST_FOLDERS = {"test", "tests", "idle_test"}


def stdlib_root() -> Path:
    """The folder of this interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_modules(seeds: SeedTree, include_tests: bool) -> list[Path]:
    """The standard library's ``.py`` files (no site-packages) in an order drawn from the seed."""
    files = stdlib_files(include_tests)
    order = seeds.numpy(ORDER.path).permutation(len(files))
    return [files[i] for i in order]


@cache
def stdlib_files(include_tests: bool) -> list[Path]:
    """The standard library's ``.py`` files in sorted order (listed once per process: validation and
    each sweep variant's check read the corpus's first documents too). The walk skips site-packages
    folders instead of listing and dropping them: a base interpreter's hold most of its files."""
    return [path for path in sorted(_python_files(stdlib_root()))
            if include_tests or not TEST_FOLDERS & set(path.parts)]


def _python_files(root: Path) -> Iterator[Path]:
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name != "site-packages"]
        yield from (Path(folder, name) for name in files if name.endswith(".py"))


def stdlib_code_documents(config: CorpusConfig, seeds: SeedTree) -> Iterator[str]:
    """One document per standard-library module, its source text."""
    for path in stdlib_modules(seeds, include_tests=True):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            yield text


def stdlib_docs_documents(config: CorpusConfig, seeds: SeedTree) -> Iterator[str]:
    """The reference manual's topics, then module/class/function docstrings of non-test modules."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield topics[name]
    for path in stdlib_modules(seeds, include_tests=False):
        yield from _docstrings(path)


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):  # a few stdlib files are deliberately invalid
        return
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))]
    for node in nodes:
        text = ast.get_docstring(node)
        if text and len(text) >= MIN_DOCSTRING_CHARS:
            yield text


def folder_documents(config: CorpusConfig, seeds: SeedTree) -> Iterator[str]:
    """Documents of a local folder: each ``.txt`` file, and each line of each ``.jsonl`` file."""
    assert config.path is not None  # the corpus check requires a path for source 'folder'
    for path in corpus_files(Path(config.path)):
        if path.suffix == ".txt":
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                yield text
            continue
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)[config.text_field]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ScenarioError(f"{path}:{number}: not a JSON object with a "
                                        f"'{config.text_field}' field (pretrain.corpus.text_field)") from None
                if isinstance(text, str) and text.strip():
                    yield text


def corpus_files(folder: Path) -> list[Path]:
    """The ``.txt`` and ``.jsonl`` files under ``folder``, in sorted path order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".txt", ".jsonl"))


def factrecall_documents(config: CorpusConfig, seeds: SeedTree) -> Iterator[str]:
    """The synthetic fact-recall documents' texts."""
    for document in generate_documents(config.factrecall, seeds.numpy(FACTRECALL.path)):
        yield document.text


SOURCES: dict[str, Callable[[CorpusConfig, SeedTree], Iterator[str]]] = {
    "stdlib_code": stdlib_code_documents,
    "stdlib_docs": stdlib_docs_documents,
    "folder": folder_documents,
    "factrecall": factrecall_documents,
}


def check_corpus(config: CorpusConfig, source: str) -> None:
    """Refuse a folder corpus whose folder is missing or holds no documents, before anything starts."""
    if config.source != "folder":
        return
    if config.path is None:
        raise ScenarioError(f"{source}: pretrain.corpus.path: source 'folder' reads a local folder; set its path")
    folder = Path(config.path)
    try:
        is_folder = folder.is_dir()
    except OSError:  # a name the system refuses (too long)
        is_folder = False
    if not is_folder:
        raise ScenarioError(f"{source}: pretrain.corpus.path: {shorten(config.path)} is not a folder")
    if not corpus_files(folder):
        raise ScenarioError(f"{source}: pretrain.corpus.path: '{config.path}' holds no .txt or .jsonl files")


# Documents of a folder corpus that validation reads (its malformed JSONL lines are found then).
SCAN_DOCUMENTS = 10_000


def check_training_documents(config: CorpusConfig, source: str, seed: int) -> None:
    """Refuse a corpus whose split leaves no training document (a folder of empty files, or every
    document held out), or a folder with a malformed JSONL line among its first `SCAN_DOCUMENTS`
    documents; a built-in source is read only up to its first training document."""
    if config.source == "bigram_backcopy":  # token documents, generated (and split) by the preparation
        return
    held_out, trains = 0, False
    try:
        for count, (heldout, _) in enumerate(iter_split(config, seed)):
            trains = trains or not heldout
            held_out += heldout
            if trains and (config.source != "folder" or count >= SCAN_DOCUMENTS):
                return
        if trains:
            return
    except ScenarioError as err:  # a malformed JSONL line: name the scenario too
        raise ScenarioError(f"{source}: {err}") from None
    if held_out == 0 and config.source == "folder":
        raise ScenarioError(f"{source}: pretrain.corpus.path: '{config.path}' holds no documents "
                            "(its .txt and .jsonl files are empty)")
    if held_out == 0:
        raise ScenarioError(f"{source}: pretrain.corpus.source: '{config.source}' gives no documents")
    raise ScenarioError(f"{source}: pretrain.corpus.heldout_fraction: all {held_out} documents are held out, "
                        "none is left to train on; lower heldout_fraction or raise max_documents")


def corpus_seeds(seed: int | SeedTree) -> SeedTree:
    """The run's seed tree: handed on as given (the preparation's), or rebuilt from the run's root
    seed by a caller that has only the int (validation, before the run has a context)."""
    return seed if isinstance(seed, SeedTree) else SeedTree(seed, strict=True)


def iter_documents(config: CorpusConfig, seed: int | SeedTree) -> Iterator[str]:
    """The corpus's documents in a fixed order, at most ``max_documents`` of them."""
    documents = SOURCES[config.source](config, corpus_seeds(seed))
    for count, text in enumerate(documents):
        if config.max_documents is not None and count >= config.max_documents:
            return
        yield text


def iter_split(config: CorpusConfig, seed: int | SeedTree) -> Iterator[tuple[bool, str]]:
    """``(is_heldout, text)`` for each document; each is held out with probability ``heldout_fraction``."""
    seeds = corpus_seeds(seed)
    draws = _uniform_stream(seeds.numpy(HELDOUT.path))
    for text in iter_documents(config, seeds):
        yield next(draws) < config.heldout_fraction, text


def factrecall_heldout(config: CorpusConfig, seed: int | SeedTree) -> list[FactRecallDocument]:
    """The held-out documents of a ``factrecall`` corpus with their questions, in corpus order."""
    seeds = corpus_seeds(seed)
    documents = generate_documents(config.factrecall, seeds.numpy(FACTRECALL.path))
    split = iter_split(config, seeds)
    return [document for document, (heldout, _) in zip(documents, split) if heldout]


def _uniform_stream(rng: np.random.Generator, block: int = 4096) -> Iterator[float]:
    while True:
        yield from rng.random(block).tolist()
