"""Which testbed modules a module will run, found by reading the imports of their sources.

Two keys are built on it: the corpus cache's (the code that prepares a corpus:
`testbed.pretrain.corpus_cache`) and a result's code fingerprint (`testbed.provenance`). Reading
rather than importing counts the imports inside functions too, and a new module without a list to
keep up to date. This module imports no other testbed module, so it adds nothing to those keys but
itself.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

PACKAGE = "testbed"


def imported_modules(*roots: str) -> dict[str, Path] | None:
    """``roots`` and every testbed module they import, directly or not (imports inside functions
    included), found by reading the imports, with their source files; None where a module has no
    ``.py`` source. What a module will run, without running it (the corpus cache's key)."""
    modules: dict[str, Path] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in modules or not name.startswith(PACKAGE + "."):
            continue
        path = module_source(name)
        if path is None:
            continue
        if path.suffix != ".py":
            return None
        modules[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        pending.extend(_imported_names(ast.parse(path.read_bytes()), package))
    return modules


def module_source(name: str) -> Path | None:
    """The source file of module ``name`` (None where there is no such module)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # `from module import attribute`: the attribute is no module
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin)


def _imported_names(tree: ast.AST, package: str) -> list[str]:
    """Every module an import of ``tree`` may name (``from a import b``: both a and a.b)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names
