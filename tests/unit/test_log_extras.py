"""No log call names a LogRecord attribute in its `extra`: logging then raises KeyError ("Attempt
to overwrite 'name' in LogRecord") whenever the level is on, as it is in every deployment, and
the request that logged it fails with a 500. Tests often run with INFO off, so only this check
sees it (it found the content picker's "LMS content item sent", which broke every pick)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from tests.unit.test_source_tree import PACKAGES, REPO

# What a LogRecord holds (and what Formatter adds): `extra` may not use these names.
RESERVED = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {"message", "asctime"}


def extra_keys(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                    found += [(key.lineno, key.value) for key in keyword.value.keys
                              if isinstance(key, ast.Constant) and isinstance(key.value, str)]
    return found


def test_the_check_sees_a_reserved_name() -> None:
    tree = ast.parse('log.info("x", extra={"event": "e", "name": "n"})')
    assert [key for _, key in extra_keys(tree) if key in RESERVED] == ["name"]


def test_no_log_extra_overwrites_a_log_record_attribute() -> None:
    clashes = [f"{path.relative_to(REPO)}:{line}: {key!r}"
               for folder in (*PACKAGES, "bench", "scripts") for path in sorted((REPO / folder).rglob("*.py"))
               for line, key in extra_keys(ast.parse(path.read_text())) if key in RESERVED]
    assert not clashes, "rename these log fields (logging reserves them):\n" + "\n".join(clashes)


def test_every_package_folder_is_scanned() -> None:
    assert all(isinstance(folder, str) and (REPO / folder).is_dir() for folder in PACKAGES)
    assert Path(REPO / "web" / "lti_deep_link.py").is_file()
