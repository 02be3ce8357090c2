"""The import structure stays as docs/architecture.md draws it: no cycle, no upward import, light
start-up, libraries that stand alone, and an install list that matches the folders.

The import graph is read from the source (every ``import`` statement, at module level or inside a
function, except those under ``if TYPE_CHECKING:``), so an import hidden in a function cannot
bring a cycle back.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[2]
# Folder -> installed package name (pyproject's package-dir).
ROOTS = {"testbed": "testbed", "strategies": "testbed.strategies", "topologies": "testbed.topologies",
         "cluster": "testbed.cluster"}

# Layers from the bottom up; a module may import only from its own layer or below. A module's
# layer is that of the longest prefix listed (``testbed.x`` covers ``testbed.x.*``).
LAYERS: list[tuple[str, ...]] = [
    ("testbed", "testbed.errors", "testbed.config", "testbed.plugins", "testbed.seeding", "testbed.determinism",
     "testbed.faults", "testbed.progress", "testbed.console", "testbed.imports", "testbed.cache"),
    ("testbed.strategies", "testbed.topologies", "testbed.cluster", "testbed.privacy"),
    ("testbed.data",),
    ("testbed.engines",),
    ("testbed.federated.config", "testbed.decentralized.config", "testbed.pretrain.config", "testbed.workloads.config",
     "testbed.workloads.*.config", "testbed.scenario", "testbed.decentralized", "testbed.federated", "testbed.pretrain",
     "testbed.workloads.usermodel",  # torch only inside its functions; imports the data layer, as the checks do
     "testbed.workloads",  # the package __init__ modules: docstrings and config re-exports only
     "testbed.claims", "testbed.claims.config", "testbed.claims.expressions", "testbed.claims.papers",
     "testbed.claims.statistics", "testbed.claims.evaluate"),  # claims as the schema sees them: no run folders
    ("testbed.run", "testbed.provenance", "testbed.trackers", "testbed.report", "testbed.runner", "testbed.loading",
     "testbed.sweep_status", "testbed.sweep_names",
     "testbed.device",  # resolves a scenario's device: reads the workload registry
     "testbed.workloads.base", "testbed.workloads.registry", "testbed.workloads.training", "testbed.workloads.audits",
     "testbed.claims.results", "testbed.claims.docs", "testbed.claims.sweeps", "testbed.claims.check"),
    ("testbed.workloads.*", "testbed.federated.*", "testbed.decentralized.*", "testbed.pretrain.*"),
    ("testbed.kinds", "testbed.validation", "testbed.execute", "testbed.sweep", "testbed.sweep_shared",
     "testbed.claims.reproduce", "testbed.claims.rerun"),
    ("testbed.cli", "testbed.sweep_slot"),  # a shared sweep slot runs each variant with the CLI
]
STANDALONE = ("testbed.strategies", "testbed.topologies")  # import nothing else of the testbed


def _module_name(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    parts[0] = ROOTS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for root in ROOTS for path in (REPO / root).rglob("*.py")}


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    skipped = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If) and "TYPE_CHECKING" in
               ast.unparse(branch.test) for body in branch.body for node in ast.walk(body)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from a import b` depends on the module a.b where there is one, else on a itself.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            # A module's own ancestors are imported by Python before it: not a dependency it chose.
            if name and name != module and not module.startswith(name + "."):
                found.add(name)
    return found


def _graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        graph.add_edges_from((module, target) for target in _imports(path, module, set(modules)))
    return graph


def _layer(module: str) -> int:
    best, best_len = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if "*" in prefix:
                head, _, tail = prefix.partition(".*")
                parts, head_parts = module.split("."), head.split(".")
                matches = module.startswith(head + ".") and (
                    not tail or (len(parts) == len(head_parts) + 2 and parts[-1] == tail.lstrip(".")))
                length = len(prefix) if tail else len(head) + 1
            else:
                matches = module == prefix or module.startswith(prefix + ".")
                length = len(prefix)
            if matches and length > best_len:
                best, best_len = index, length
    assert best >= 0, f"{module} is in no layer of this test: add it to LAYERS"
    return best


def test_the_import_graph_has_no_cycle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert cycles == []


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{a} -> {b}" for a, b in _graph().edges if _layer(b) > _layer(a)]
    assert upward == []


def test_the_schema_and_the_federated_kind_import_no_workload_package():
    """A paper's code enters the core and a kind only through a registry (its audits through
    `testbed.workloads.audits`), never by name: the schema and the federated kind import no module of a
    workload's own package (testbed/workloads/<name>/)."""
    packages = {f"testbed.workloads.{p.parent.name}" for p in (REPO / "testbed" / "workloads").glob("*/__init__.py")}
    kinds_and_schema = ("testbed.scenario", "testbed.federated.")
    reaching = [f"{a} -> {b}" for a, b in _graph().edges
                if a.startswith(kinds_and_schema) and ".".join(b.split(".")[:3]) in packages]
    assert reaching == []


def test_the_libraries_import_nothing_else_of_the_testbed():
    leaks = [f"{a} -> {b}" for a, b in _graph().edges
             if a.startswith(STANDALONE) and not b.startswith(a.split(".")[0] + "." + a.split(".")[1])]
    assert leaks == []


def test_nothing_registers_by_importing_a_module_for_its_side_effect():
    marked = [f"{p.relative_to(REPO)}:{n}" for root in ROOTS for p in (REPO / root).rglob("*.py")
              for n, line in enumerate(p.read_text().splitlines(), 1) if "noqa: F401" in line]
    assert marked == []


@pytest.mark.integration
def test_the_wheel_holds_every_folder_under_its_installed_name(tmp_path):
    """setup.py reads the packages from the folders: a new workload package installs with no line
    anywhere else (a list kept by hand missed one before)."""
    source = tmp_path / "source"  # a copy: setuptools writes build/ and egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for root in ROOTS:
        shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source),
                    "-w", str(tmp_path)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("testbed-*.whl")
    inits = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith("/__init__.py")}
    installed = {name.removesuffix("/__init__.py").replace("/", ".") for name in inits}
    folders = {_module_name(init) for root in ROOTS for init in (REPO / root).rglob("__init__.py")}
    assert installed == folders
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "packages" not in config, "pyproject.toml lists packages by hand again"
    assert config["package-dir"] == {package: folder for folder, package in ROOTS.items()}


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return set(done.stdout.split())


HEAVY = ("torch", "flwr", "ray", "deepspeed", "sklearn", "mpi4py", "matplotlib", "opacus")


@pytest.mark.integration
@pytest.mark.parametrize("statement", [
    "import testbed.cli",
    "from testbed.loading import load_scenario; load_scenario('%s')" % (REPO / "scenarios" / "quickstart.yaml"),
    "from testbed.cli import main; main(['validate', '%s'])" % (REPO / "scenarios" / "quickstart.yaml"),
    "from testbed.cli import main; main(['list', 'workloads'])",
], ids=["import-cli", "load-scenario", "validate", "list-workloads"])
def test_the_schema_and_the_cli_import_no_heavy_library(statement):
    heavy = sorted(m for m in _loaded_after(statement) if m.split(".")[0] in HEAVY)
    assert heavy == []


@pytest.mark.integration
def test_sdea_and_the_accountants_stand_alone():
    loaded = _loaded_after("from testbed.strategies import SDEA; from testbed.topologies import random_walk_pndp")
    testbed_modules = sorted(m for m in loaded if m.startswith("testbed.") and not m.startswith(STANDALONE))
    assert testbed_modules == []
