"""The parallel run's order names files (tests/conftest.py): each must exist, or a renamed
heavy file would run beside the others and a long one would finish last unnoticed."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HEAVY_FILES, LONG_FILES

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_the_order_names_exists() -> None:
    missing = [f for f in (*HEAVY_FILES, *LONG_FILES) if not (ROOT / f).is_file()]
    assert missing == []


def test_a_long_file_is_never_a_heavy_one() -> None:
    assert set(LONG_FILES).isdisjoint(HEAVY_FILES)
