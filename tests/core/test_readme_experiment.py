"""The README's own-experiment scenario is the file in examples/own-experiment/, and it validates there:
the table's schema, the natural partition over its hospitals and the user's model on a batch of it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own-experiment"


def test_the_readme_shows_the_example_file_word_for_word():
    readme = (ROOT / "README.md").read_text()
    shown = re.search(r"```yaml\n(name: my-hospitals\n.*?)```", readme, re.S)
    assert shown is not None, "the README's own-experiment scenario is gone"
    assert shown.group(1) == (EXAMPLE / "my.yaml").read_text()
    assert len(shown.group(1).splitlines()) <= 15


def test_the_readme_experiment_validates_with_its_model_and_natural_partition(cli, monkeypatch):
    monkeypatch.chdir(EXAMPLE)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    code, out, err = cli("validate", "my.yaml")
    assert code == 0, err
    assert "workload.model mynets:TwoLayer: 386 parameters" in out
