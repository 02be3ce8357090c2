"""The registry of communication topologies a scenario's ``topology.name`` can name.

The built-in graph builders of `testbed.topologies` (a library that imports nothing of the
testbed, registered under their function names), then the ``testbed.topologies`` plugins: a
package declares a builder function, keyword parameters plus ``seed``, returning a connected
`networkx.Graph` on nodes ``0..n-1``::

    [project.entry-points."testbed.topologies"]
    my_graph = "my_package.graphs:my_graph"
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from types import FunctionType

import networkx as nx

from testbed.plugins import declare
from testbed.topologies import GRAPH_BUILDERS


@cache
def registered_topologies() -> dict[str, Callable[..., nx.Graph]]:
    """Every graph builder by name: the library's, then the installed plugins'."""
    return declare("testbed.topologies", GRAPH_BUILDERS.values(), FunctionType, as_class=False)
