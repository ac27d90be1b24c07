"""A failing test's report must survive CPython 3.11's AST recursion-depth bug.

On this machine's Python (3.11.7), `ast.parse` can raise `SystemError: AST constructor recursion
depth mismatch` once the interpreter's AST state is off (python/cpython#106905, fixed in later
releases; pytest-dev/pytest#10874). pytest's own failure report parses the test's source with
`ast.parse`, so one ordinary failure then became an INTERNALERROR that ended the whole xdist
session (a fresh-clone run here: 3,172 tests run of 3,640, the rest never started). Python's
native traceback format tolerates any error while it looks for carets, so when the bug shows,
this worker reports that failure, and every later one (its AST state stays broken), natively.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from _pytest.reports import TestReport

AST_BUG = "AST constructor recursion depth mismatch"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, TestReport, TestReport]:
    try:
        return (yield)
    except SystemError as err:
        if AST_BUG not in str(err):
            raise
        item.config.option.tbstyle = "native"
        return TestReport.from_item_and_call(item, call)
