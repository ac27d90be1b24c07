"""The source tree keeps its own promises: what a comment names exists, and modules stay small.

- A docstring or comment that names a repository path (`platform/clients/redis_pool.py`,
  `tests/web/pages/support.py`) sends its reader there; once that file is renamed or deleted it
  sends them nowhere. Only docstrings and comments are read: a string the code uses may name a
  path that does not exist on purpose (a test's forged upload).
- A module of the project (its packages, bench/ and scripts/; tests aside) is at most MAX_LINES
  lines: a longer one does more than one thing (kopf keeps its modules to 150-500 lines);
  split it by purpose.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("platform", "operator", "auth", "proxy", "web", "cli", "local", "coursework")
SCANNED = (*PACKAGES, "bench", "scripts", "tests")
TOP_FOLDERS = (*SCANNED, "deploy", "docs")
MAX_LINES = 500
# A path from the repository's root to a file: a top-level folder, then at least one more part
# with an extension. Not preceded by a path character, so `userland/platform/x.py` (an installed
# path) and `a/tests/x.py` are not taken for one.
_FOLDER = "|".join(TOP_FOLDERS)
_EXTENSION = "py|md|yaml|yml|json|sh|html|toml|txt|css|js"
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{_FOLDER})/[\w./-]*\w\.(?:{_EXTENSION}))\b")


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring (module, class, function) and comment in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def named_paths(source: str) -> list[tuple[int, str]]:
    return [(line, found.group(1)) for line, text in prose(source) for found in REPO_PATH.finditer(text)]


def test_the_scan_reads_docstrings_and_comments_only() -> None:
    source = ('"""See platform/clients/kube.py and docs/sleep.md#wake."""\n'
              'PATH = "platform/not_prose.py"\n'
              'x = 1  # moved to tests/web/pages/support.py, not userland/platform/x.py\n'
              'def f() -> None:\n'
              '    """Writes scripts/gen.sh (not tests/x/*.py)."""\n')
    assert named_paths(source) == [(1, "platform/clients/kube.py"), (1, "docs/sleep.md"), (5,
                                                                                           "scripts/gen.sh"),
                                   (3, "tests/web/pages/support.py")]


def test_every_path_a_docstring_or_comment_names_exists() -> None:
    missing = [f"{path.relative_to(REPO)}:{line}: {named}"
               for folder in SCANNED for path in sorted((REPO / folder).rglob("*.py"))
               for line, named in named_paths(path.read_text()) if not (REPO / named).exists()]
    assert not missing, "these name files that do not exist (renamed? deleted?):\n" + "\n".join(missing)


def test_no_module_of_the_project_is_over_the_limit() -> None:
    long = [f"{path.relative_to(REPO)}: {lines} lines"
            for folder in (*PACKAGES, "bench", "scripts") for path in sorted((REPO / folder).rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_LINES]
    assert not long, f"split these by purpose (at most {MAX_LINES} lines each):\n" + "\n".join(long)
