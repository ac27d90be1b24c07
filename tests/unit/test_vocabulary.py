"""One owner for each fact of the platform's vocabulary (issue 18).

- Every `userland.dev/...` label, annotation, finalizer and API version is spelled once, in
  platform/model/naming.py; code elsewhere imports the name. Two spellings of one key is how the
  dashboard's filters and the course-wide actions came to disagree. Docstrings and comments
  may mention a key (they explain); a string the code uses may not.
- Every Redis key, key pattern and pub/sub channel (`userland:...`) is spelled once, in
  platform/model/keyspace.py: the keyspace is a contract between the gateway, auth and the web UI.
  This scan includes the tests: they build keys with the module too, and
  tests/unit/test_keyspace.py alone holds every key as a literal (byte for byte, so a Redis
  that outlives an upgrade keeps its sessions and grants).
- The Userland body is built once (platform/model/bodies.py) for the web UI, the gateway and the
  local setup.

Tests are left out of the `userland.dev/` scan on purpose: they spell the contract
independently, so a key renamed by mistake in naming.py fails a test instead of silently
changing the contract.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from userland.platform.model import naming
from userland.platform.model.bodies import userland_body
from userland.web.actions import desired_userland
from userland.web.rules.roster import RosterRow

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("platform", "operator", "auth", "proxy", "web", "cli", "local", "bench", "scripts")
OWNER = REPO / "platform" / "model" / "naming.py"
VOCABULARY = "userland.dev/"
KEYSPACE_SCANNED = (*SCANNED, "coursework", "tests")
KEYSPACE_OWNERS = (REPO / "platform" / "model" / "keyspace.py", REPO / "tests" / "unit" / "test_keyspace.py")
# A Redis key: `userland:`, a lowercase word or a glob, then ':' or the end of the string. Other
# strings start alike and are no keys: Prometheus rule names (`userland:slo_wake:...`) have a
# '_', the CLI's messages ("userland: ...") a space, image tags a digit ("userland:0.1.0").
REDIS_KEY = re.compile(r"userland:[a-z*][a-z*-]*(:|$)")
NOT_KEYS = {"userland:local"}  # the worker image's local tag


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (of the module, classes, functions)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def vocabulary_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string the code uses that spells a `userland.dev/` key."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and VOCABULARY in node.value and id(node) not in skip]


def keyspace_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string the code uses that spells a `userland:` Redis key."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and node.value not in NOT_KEYS and REDIS_KEY.search(node.value)]


def test_the_keyspace_scan_finds_keys_channels_and_patterns_in_code() -> None:
    # The prefix is put together here so that this file spells no key itself.
    source = ('"""Reads `KEY:grant:<id>`."""\n'
              'A = "KEY:grant:"\n'
              'B = f"KEY:wake:{ns}/{name}"\n'
              'C = "KEY:help-changes"\n'
              'D = "KEY:*session:*"\n'
              "E = \"redis.call('GET', 'KEY:grant:' .. id)\"\n"
              'F = f"KEY: {err}"\n'
              'G = "KEY:slo_wake:error_ratio_rate1h"\n'
              'H = "registry/KEY:0.1.0"\n'
              'I = "KEY:local"\n').replace("KEY", "userland")
    assert sorted(line for line, _ in keyspace_literals(source)) == [2, 3, 4, 5, 6]


def test_redis_keys_are_spelled_only_in_platform_keyspace() -> None:
    offenders = []
    for folder in KEYSPACE_SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path in KEYSPACE_OWNERS:
                continue
            for line, text in keyspace_literals(path.read_text()):
                offenders.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert not offenders, ("build the key with userland.platform.model.keyspace instead:\n"
                           + "\n".join(offenders))


def test_the_scan_finds_a_key_in_code_and_not_in_a_docstring() -> None:
    source = '"""Sets `userland.dev/x`."""\nKEY = "userland.dev/x"\nf"{KEY}userland.dev/y"\n'
    assert vocabulary_literals(source) == [(2, "userland.dev/x"), (3, "userland.dev/y")]


def test_vocabulary_is_spelled_only_in_platform_naming() -> None:
    offenders = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == OWNER:
                continue
            for line, text in vocabulary_literals(path.read_text()):
                offenders.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert not offenders, "use the name from userland.platform.model.naming instead:\n" + "\n".join(offenders)


def test_the_owner_defines_each_key_once() -> None:
    values = [value for name, value in vars(naming).items()
              if name.isupper() and isinstance(value, str) and value.startswith(VOCABULARY)]
    assert len(values) == len(set(values)), sorted(v for v in values if values.count(v) > 1)


def test_userland_body() -> None:
    assert userland_body("vscode", "Alice", namespace="cs101",
                         annotations={naming.ANNOTATION_ADDED_BY: "teacher"}) == {
        "apiVersion": "userland.dev/v1alpha1",
        "kind": "Userland",
        "metadata": {"name": "vscode-alice", "namespace": "cs101",
                     "labels": {"userland.dev/user": "alice", "userland.dev/template": "vscode"},
                     "annotations": {"userland.dev/added-by": "teacher"}},
        "spec": {"user": "alice", "template": "vscode"},
    }


def test_userland_body_shortens_a_long_template_name_in_its_label() -> None:
    template = "t" * 63
    body = userland_body(template, "bob")
    assert body["metadata"]["labels"]["userland.dev/template"] == naming.label_value(template)
    assert len(body["metadata"]["labels"]["userland.dev/template"]) <= 63
    assert body["spec"] == {"user": "bob", "template": template}


def test_userland_body_refuses_an_invalid_login() -> None:
    with pytest.raises(naming.InvalidName):
        userland_body("vscode", "-bad-")


def test_the_web_ui_adds_students_with_the_shared_body() -> None:
    row = RosterRow(line=2, login="carol", name="Carol C", section="B")
    assert desired_userland("ide", row, actor="teacher") == userland_body("ide", "carol", annotations={
        "userland.dev/added-by": "teacher", "userland.dev/name": "Carol C", "userland.dev/section": "B"})
