"""The never-overwrite rules (coursework/rules/merge.py) against their golden cases.

Every rule docs/assignments.md states has at least one case in golden/handout_rules.json, and
every case names its rule; the test also checks the docs and the cases list the same rules, so
a rule can be neither documented without a case nor tested without being documented.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from userland.coursework.rules.merge import CONFLICT_WORDS, Present, SourceFile, plan_merge, relevant_paths

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((Path(__file__).parent / "golden" / "handout_rules.json").read_text())["cases"]


def present(text: str) -> Present:
    kind, _, digest = text.partition(":")
    assert kind in ("file", "dir", "link", "other"), text
    return Present(kind, digest)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", GOLDEN, ids=[f"{c['rule']}: {c['name']}" for c in GOLDEN])
def test_rule(case: dict[str, Any]) -> None:
    source = {path: SourceFile(digest) for path, digest in case["source"].items()}
    current = {path: present(text) for path, text in case["current"].items()}
    # Every path the rules look at is described (the worker reads exactly these from the folder).
    for path in relevant_paths(source, case["manifest"]):
        current.setdefault(path, None)  # type: ignore[arg-type]
    current = {k: v for k, v in current.items() if v is not None}
    plan = plan_merge(source, case["manifest"], current)
    assert list(plan.write) == case["write"]
    assert list(plan.delete) == case["delete"]
    assert [[c.path, c.kind] for c in plan.conflicts] == case["conflicts"]
    assert plan.manifest == case["manifest_after"]


def test_a_plan_never_writes_or_removes_what_the_student_changed() -> None:
    """Over every combination of (given, source, current) for one file: a write happens only
    where the student has nothing or exactly what they were given, a removal only of exactly
    what they were given."""
    digests = ["a", "b", "c"]
    for last in [None, *digests]:
        for new in [None, *digests]:
            for have in [None, "dir", "link", *(f"file:{d}" for d in digests)]:
                source = {} if new is None else {"f": SourceFile(new)}
                manifest = {} if last is None else {"f": last}
                current = {} if have is None else {"f": present(have)}
                plan = plan_merge(source, manifest, current)
                if "f" in plan.write:
                    assert (have is None and last is None) or have == f"file:{last}", (last, new, have)
                if "f" in plan.delete:
                    assert have == f"file:{last}" and new is None, (last, new, have)


def test_the_documented_rules_are_the_tested_rules() -> None:
    docs = (ROOT / "docs" / "assignments.md").read_text()
    documented = set(re.findall(r"^\*\*(R\d+)\b", docs, flags=re.MULTILINE))
    tested = {case["rule"] for case in GOLDEN}
    assert documented == tested
    for kind in CONFLICT_WORDS:
        assert f"`{kind}`" in docs, f"conflict kind {kind} is not documented"
