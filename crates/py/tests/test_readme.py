"""The README's Python examples (its ``pycon`` blocks) print what the README shows: each block
runs as a doctest, in order, from the repository's root."""

from __future__ import annotations

import doctest
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def pycon_blocks(text: str) -> list[str]:
    return re.findall(r"```pycon\n(.*?)```", text, flags=re.S)


def test_the_readme_python_examples_print_what_the_readme_shows(monkeypatch):
    blocks = pycon_blocks((ROOT / "README.md").read_text())
    assert blocks, "the README has no pycon example"
    monkeypatch.chdir(ROOT)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs: dict = {}
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, globs, f"README pycon block {i + 1}", "README.md", 0)
        assert test.examples, block
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} README example(s) print something else now"
    assert result.attempted >= 4
    assert os.getcwd() == str(ROOT)
