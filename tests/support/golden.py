"""Golden files: the expected output of a pure function, kept as JSON beside its test.

`check_golden(path, actual)` compares; with `UPDATE_GOLDEN=1` in the environment a file that
differs is rewritten and the test FAILS, saying so: a run that writes the file never passes
against what it just wrote. Review the diff (`git diff`), then run again without the variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest


def check_golden(path: Path, actual: Any) -> None:
    text = json.dumps(actual, indent=2, sort_keys=True) + "\n"
    expected = json.loads(path.read_text()) if path.exists() else None
    if expected == json.loads(text):
        return
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
        pytest.fail(f"{path} rewritten (UPDATE_GOLDEN): review the diff, then run again without it")
    assert expected is not None, f"{path} is missing: run once with UPDATE_GOLDEN=1 and review it"
    assert json.loads(text) == expected, f"differs from {path}"
