"""Error type raised by every `topologies` function when its input is unusable.

A single `ValueError` subclass lets callers (scenario loaders, CLI) catch bad
topology or accounting input without also catching unrelated programming errors.
"""


class TopologyError(ValueError):
    """A graph, transition matrix or accounting parameter that cannot be used.

    The message is one line and names the problem, e.g.
    ``graph 'ring' is disconnected (3 components)``.
    """
