"""Rosters: the list of students a teacher pastes or uploads, turned into checked rows. Pure, no I/O.

Two ways in:
- `parse_logins(text)`: GitHub logins pasted into a box, separated by newlines, commas,
  semicolons or whitespace (`@alice`, `Alice`, `https://github.com/alice` all mean `alice`);
- `parse_csv(data)`: a spreadsheet saved as CSV with a header row naming a login column
  (`login`, `github`, `username`, ...) and optionally name, email and section columns. UTF-8
  with or without a BOM, UTF-16 with a BOM (Excel's "Unicode text"), comma, semicolon or tab
  separated.

Every entry becomes a `RosterRow`; a row that cannot be used keeps the raw text and says why in
`problem` (so the teacher sees exactly which line to fix), and a repeated login points at its
first line. A file that cannot be a roster at all raises `RosterError`, whose message is a
sentence the teacher can act on.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from userland.platform.model import naming

MAX_ROSTER_BYTES = 1_048_576  # an upload larger than this is refused
MAX_ROSTER_ROWS = 2000
MAX_FIELD_CHARS = 200  # name, email and section end up in annotations: keep them short

# Header names (lowercase, letters and digits only) for each column we read.
LOGIN_HEADERS = ("login", "github", "username", "githublogin", "githubusername", "githubuser",
                 "githubhandle", "githubaccount")
NAME_HEADERS = ("name", "fullname", "studentname", "displayname")
EMAIL_HEADERS = ("email", "mail", "emailaddress")
SECTION_HEADERS = ("section", "group", "lab", "tutorial")

_SEPARATORS = re.compile(r"[\s,;]+")
_PROFILE_URL = re.compile(r"^https?://[^/\s]+/([^/\s?#]+)/?$", re.IGNORECASE)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RosterError(ValueError):
    """str() is a sentence a teacher can act on (too large, not UTF-8, not CSV, no login column...)."""


@dataclass(frozen=True)
class RosterRow:
    line: int  # 1-based line in the paste / CSV (header = line 1)
    login: str  # normalized (lowercase, leading '@' and spaces stripped) when valid; raw text when not
    name: str = ""
    email: str = ""
    section: str = ""
    problem: str = ""  # non-empty: why this row is invalid ("not a GitHub login: ...", "duplicate of line 3")

    @property
    def ok(self) -> bool:
        return not self.problem


def _check_size(size: int, what: str) -> None:
    if size > MAX_ROSTER_BYTES:
        raise RosterError(
            f"The {what} is {size / 1_048_576:.1f} MiB; a roster may be at most 1 MiB "
            f"({MAX_ROSTER_ROWS} students). Split it and add the parts one after the other."
        )


def _too_many(count: int) -> RosterError:
    return RosterError(
        f"The roster has more than {MAX_ROSTER_ROWS} students ({count} so far); split it and add "
        "the parts one after the other."
    )


def _login_problem(raw: str) -> tuple[str, str]:
    """(normalized login, "") when `raw` names a GitHub login, else (raw, why not)."""
    text = raw.strip()
    if (url := _PROFILE_URL.match(text)) is not None:
        text = url.group(1)
    text = text.lstrip("@").strip()
    if not text:
        return raw.strip(), "no GitHub login in this row"
    if naming.is_valid_login(text):
        return text.lower(), ""
    shown = _CONTROL.sub("?", raw.strip())[:60]
    if _EMAIL.match(text):
        return shown, f"an email address, not a GitHub login: {shown!r}"
    return shown, (f"not a GitHub login: {shown!r} (1-39 letters, digits or single hyphens, "
                   "not starting or ending with a hyphen)")


def _dedupe(rows: Iterable[RosterRow]) -> list[RosterRow]:
    first_line: dict[str, int] = {}
    result: list[RosterRow] = []
    for row in rows:
        if row.ok and row.login in first_line:
            row = RosterRow(row.line, row.login, row.name, row.email, row.section,
                            problem=f"duplicate of line {first_line[row.login]}")
        elif row.ok:
            first_line[row.login] = row.line
        result.append(row)
    return result


def parse_logins(text: str) -> list[RosterRow]:
    """Rows for logins pasted into a box (one or more per line). Raises RosterError when too big."""
    _check_size(len(text.encode("utf-8", errors="replace")), "text")
    rows: list[RosterRow] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for token in _SEPARATORS.split(line):
            if not token:
                continue
            login, problem = _login_problem(token)
            rows.append(RosterRow(line=number, login=login, problem=problem))
            if len(rows) > MAX_ROSTER_ROWS:
                raise _too_many(len(rows))
    return _dedupe(rows)


def _decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise RosterError("The file starts like UTF-16 text but is not; save it as CSV UTF-8.") from None
    if data.startswith(b"PK\x03\x04"):
        raise RosterError("This is a spreadsheet workbook (such as .xlsx), not CSV: in your spreadsheet "
                          "program choose File > Save as > CSV UTF-8, and upload that file.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise RosterError(
            f"The file is not UTF-8 text (byte {err.start + 1} cannot be read): save it as "
            "'CSV UTF-8' and upload it again."
        ) from None
    if "\x00" in text:
        raise RosterError("The file holds binary data, not CSV text: save the roster as 'CSV UTF-8'.")
    return text


def _header_key(cell: str) -> str:
    return re.sub(r"[^a-z0-9]", "", cell.strip().lower())


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    keys = [_header_key(cell) for cell in header]
    for name in names:  # the first name in the list wins when several columns match
        if name in keys:
            return keys.index(name)
    return None


def _dialect(text: str) -> type[csv.Dialect] | csv.Dialect:
    first = text.split("\n", 1)[0]
    try:
        return csv.Sniffer().sniff(first, delimiters=",;\t")
    except csv.Error:
        return csv.excel  # one column, or nothing to go by


def _records(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line of the record, cells) for every non-blank record."""
    reader = csv.reader(io.StringIO(text, newline=""), _dialect(text))
    line = 1
    try:
        for cells in reader:
            if any(cell.strip() for cell in cells):
                yield line, cells
            line = reader.line_num + 1
    except csv.Error as err:
        raise RosterError(
            f"Line {reader.line_num} is not valid CSV ({err}); check the quotes there."
        ) from None


def _field(cells: list[str], index: int | None) -> str:
    if index is None or index >= len(cells):
        return ""
    return " ".join(_CONTROL.sub(" ", cells[index]).split())


def _row(line: int, cells: list[str], columns: tuple[int, int | None, int | None, int | None]) -> RosterRow:
    login_col, name_col, email_col, section_col = columns
    login, problem = _login_problem(_field(cells, login_col))
    name, email, section = (_field(cells, c) for c in (name_col, email_col, section_col))
    for label, value in (("name", name), ("email", email), ("section", section)):
        if len(value) > MAX_FIELD_CHARS and not problem:
            problem = f"the {label} is longer than {MAX_FIELD_CHARS} characters"
    if email and not _EMAIL.match(email) and not problem:
        problem = f"not an email address: {email[:60]!r}"
    return RosterRow(line=line, login=login, name=name, email=email, section=section, problem=problem)


def parse_csv(data: bytes) -> list[RosterRow]:
    """Rows of an uploaded CSV roster. Raises RosterError for a file that cannot be one."""
    _check_size(len(data), "file")
    text = _decode(data)
    records = _records(text)
    first = next(records, None)
    if first is None:
        raise RosterError("The file is empty: it needs a header row (such as 'login,name,email') and "
                          "one student per row.")
    _, header = first
    login_col = _column(header, LOGIN_HEADERS)
    if login_col is None:
        found = ", ".join(repr(c.strip()[:40]) for c in header[:10] if c.strip()) or "nothing"
        raise RosterError(
            "No login column: the first row must name the column of GitHub logins 'login' "
            f"(or 'github', 'username'); it has {found}."
        )
    columns = (login_col, _column(header, NAME_HEADERS), _column(header, EMAIL_HEADERS),
               _column(header, SECTION_HEADERS))
    rows: list[RosterRow] = []
    for line, cells in records:
        rows.append(_row(line, cells, columns))
        if len(rows) > MAX_ROSTER_ROWS:
            raise _too_many(len(rows))
    return _dedupe(rows)
