"""docs/reproduction.md and the per-paper tables are what the committed result files give, byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.claims import docs
from testbed.claims.papers import PAPERS
from testbed.claims.reproduce import reproduce

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_reproduction_docs_are_generated_from_the_result_files(tmp_path):
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")

    reproduce(tmp_path, [], "full", tmp_path / "runs", run=False, quiet=True)

    pages = ["reproduction.md"] + [f"reproduction/{paper.details}" for paper in PAPERS.values()]
    differ = [page for page in pages if (tmp_path / "docs" / page).read_bytes() != (ROOT / "docs" / page).read_bytes()]
    assert not differ, f"regenerate with 'testbed reproduce --docs-only': {differ} differ from the result files"
    assert not (tmp_path / "runs").exists()  # --docs-only runs nothing


def test_every_paper_page_carries_its_generated_table():
    for paper in PAPERS.values():
        text = (ROOT / "docs" / "reproduction" / paper.details).read_text()
        assert text.count(docs.BEGIN) == 1 and text.count(docs.END) == 1, paper.details


def test_splicing_replaces_only_the_generated_block():
    page = f"# Title\n\nwhy it matters\n\n{docs.BEGIN}\nold table\n{docs.END}\n\n## Analysis\nwhat was tried\n"
    block = f"{docs.BEGIN}\nnew table\n{docs.END}\n"
    spliced = docs.splice(page, block)
    assert spliced == page.replace("old table", "new table")
    assert docs.splice(spliced, block) == spliced
    assert docs.splice("# Title\nbody\n", block) == f"# Title\n\n{block}\nbody\n"
