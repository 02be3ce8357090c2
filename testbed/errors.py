"""Error types that decide how the CLI exits.

A `UserError` is something the user can fix (a bad scenario file, a missing file, a run folder that
already exists): the CLI prints its one-line message and exits with code 2, without a traceback.
Anything else is a bug in the testbed and exits with code 1.
"""

import difflib


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the file and field."""


class ScenarioError(UserError):
    """A scenario file or override that does not validate."""


def did_you_mean(word: str, candidates) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``candidates`` to ``word``, or ``""`` if none is close."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""
