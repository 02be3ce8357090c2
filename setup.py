"""The packages the testbed installs, read from its folders; pyproject.toml declares everything else.

The three libraries keep the top-level folders the layout asks for but install inside the testbed's
namespace (`testbed.strategies`, `testbed.topologies`, `testbed.cluster`; the mapping is pyproject's
`package-dir`). setuptools' `packages.find` names a package after its folder, so it cannot give
those names, and an explicit list in pyproject.toml had to gain a line for every new workload
package. Here every folder with an `__init__.py` under a root is a package, named in its installed
namespace: a new workload is its own package and nothing else.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"testbed": "testbed", "strategies": "testbed.strategies", "topologies": "testbed.topologies",
         "cluster": "testbed.cluster"}


def packages(here: Path) -> list[str]:
    """Every package under each root, by its installed name."""
    return sorted(".".join((namespace, *init.parent.relative_to(here / folder).parts))
                  for folder, namespace in ROOTS.items() for init in (here / folder).rglob("__init__.py"))


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__
    setup(packages=packages(Path(__file__).resolve().parent))
