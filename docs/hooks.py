"""MkDocs hook: files kept outside ``docs/`` join the site at their place in the repository.

The notebooks in ``notebooks/`` are the tutorials (rendered by mkdocs-jupyter, not executed:
``tests/test_notebooks.py`` executes them), ``benchmarks/``'s pages (``README.md``,
``RESULTS.md``, ``HISTORY.md``) the benchmark pages, and ``examples/pendulum.png`` (the
README's figure) the home page's: each has one copy, the one the tests, benchmarks and
README use. Each is a plain file of the repository root (``src_dir``), so mkdocs-jupyter's
wrapper reads it as it reads a page of ``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ("notebooks/*.ipynb", "benchmarks/*.md", "examples/pendulum.png")


@event_priority(100)  # before mkdocs-jupyter looks for notebooks among the files
def on_files(files, config):
    """Add the files of ``OUTSIDE`` to the site's files, at their path from the root."""
    for pattern in OUTSIDE:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
