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


class ResumableFailure(UserError):
    """The run stopped on a failure outside the scenario (a lost node) and kept its checkpoints:
    ``testbed resume`` continues it to the numbers of an uninterrupted run. The CLI prints the one
    line and exits with code 3."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the CLI exits with code 130, naming the folder `testbed resume` continues."""

    def __init__(self, run_dir: object):
        super().__init__(str(run_dir))
        self.run_dir = run_dir


# Values a message echoes are cut to this many characters: a 1 MB value must not become a 1 MB line.
ECHO_LIMIT = 80


def shorten(value: object, limit: int = ECHO_LIMIT, keep_end: bool = False) -> str:
    """``repr(value)``, cut to ``limit`` characters with an ellipsis, for echoing user input in a message.
    ``keep_end`` cuts the start instead: a long path keeps its file name, the part that tells which file."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return "..." + text[3 - limit:] if keep_end else text[: limit - 3] + "..."


def one_line(message: str) -> str:
    """A message as the one line the CLI prints: line breaks become spaces, characters no terminal can
    show become escapes, and a message longer than a few lines' worth is cut (the field it names
    comes first)."""
    text = " ".join(str(message).splitlines()).encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 1000 else text[:997] + "..."


def did_you_mean(word: str, candidates) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``candidates`` to ``word``, or ``""`` if none is close."""
    if len(word) > 2 * ECHO_LIMIT:  # no key is that long (and difflib would index all of it)
        return ""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""
