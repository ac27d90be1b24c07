"""The golden-file helper never lets a test pass against a file the same run wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.golden import check_golden


def test_a_match_passes(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"a": 1}))
    check_golden(path, {"a": 1})


def test_a_difference_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"a": 1}))
    with pytest.raises(AssertionError, match="differs"):
        check_golden(path, {"a": 2})


def test_updating_rewrites_the_file_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPDATE_GOLDEN", "1")
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"a": 1}))
    with pytest.raises(pytest.fail.Exception, match="rewritten"):
        check_golden(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    check_golden(path, {"a": 2})  # the next run, reviewed: passes


def test_a_missing_file_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    with pytest.raises(AssertionError, match="missing"):
        check_golden(tmp_path / "none.json", {"a": 1})
