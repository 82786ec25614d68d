"""MkDocs hook: pages kept outside ``docs/`` join the site where they live in the repository.

The notebooks in ``notebooks/`` become ``tutorials/`` (rendered by mkdocs-jupyter, not
executed: ``tests/test_notebooks.py`` executes them), ``benchmarks/``'s pages (``README.md``,
``RESULTS.md``, ``HISTORY.md``) become ``benchmarks/``, and the README's figure ``examples/pendulum.png`` is
the home page's too: each has one copy, the one the tests, benchmarks and README use.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = {
    "tutorials": (ROOT / "notebooks", "*.ipynb"),
    "benchmarks": (ROOT / "benchmarks", "*.md"),
    ".": (ROOT / "examples", "pendulum.png"),
}


@event_priority(100)  # before mkdocs-jupyter looks for notebooks among the files
def on_files(files, config):
    """Add the files of ``OUTSIDE`` to the site's files, under their folder's site name."""
    for name, (folder, pattern) in OUTSIDE.items():
        for path in sorted(folder.glob(pattern)):
            uri = path.name if name == "." else f"{name}/{path.name}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
