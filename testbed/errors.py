"""Error types that decide how the CLI exits.

A `UserError` is something the user can fix (a bad scenario file, a missing file, a run folder that
already exists): the CLI prints its one-line message and exits with code 2, without a traceback.
Anything else is a bug in the testbed and exits with code 1.
"""


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the file and field."""


class ScenarioError(UserError):
    """A scenario file or override that does not validate."""
