"""Roster parsing (web/rules/roster.py): what a teacher pastes or uploads becomes checked rows. Pure."""

from __future__ import annotations

import codecs
import random

import pytest

from userland.web.rules.roster import (
    MAX_ROSTER_BYTES,
    MAX_ROSTER_ROWS,
    RosterError,
    RosterRow,
    parse_csv,
    parse_logins,
)


def logins(rows: list[RosterRow]) -> list[tuple[int, str, str]]:
    return [(r.line, r.login, r.problem) for r in rows]


# --- pasted logins ---------------------------------------------------------------------------------


def test_paste_separated_by_newlines_commas_semicolons_and_whitespace() -> None:
    rows = parse_logins("alice, bob;carol\n\n  dave\teve  \r\nfrank")
    assert logins(rows) == [(1, "alice", ""), (1, "bob", ""), (1, "carol", ""), (3, "dave", ""),
                            (3, "eve", ""), (4, "frank", "")]
    assert all(r.ok for r in rows)


@pytest.mark.parametrize(("typed", "login"), [
    ("Alice", "alice"),
    ("@Koba1t", "koba1t"),
    ("  @@bob-smith  ", "bob-smith"),
    ("https://github.com/Carol-1", "carol-1"),
    ("https://github.com/dave/", "dave"),
    ("a" * 39, "a" * 39),
])
def test_paste_normalizes_logins(typed: str, login: str) -> None:
    (row,) = parse_logins(typed)
    assert (row.login, row.problem) == (login, "")


@pytest.mark.parametrize(("typed", "why"), [
    ("-alice", "not a GitHub login"),
    ("alice-", "not a GitHub login"),
    ("al--ice", "not a GitHub login"),
    ("a" * 40, "not a GitHub login"),
    ("al_ice", "not a GitHub login"),
    ("../../secrets", "not a GitHub login"),
    ("=HYPERLINK(\"http://evil\")", "not a GitHub login"),
    ("<script>", "not a GitHub login"),
    ("alice@uni.edu", "an email address, not a GitHub login"),
    ("https://github.com/alice/repo", "not a GitHub login"),
    ("@", "no GitHub login"),
    ("ålice", "not a GitHub login"),
])
def test_paste_keeps_invalid_entries_with_the_reason(typed: str, why: str) -> None:
    (row,) = parse_logins(typed)
    assert not row.ok
    assert row.problem.startswith(why), row.problem
    assert row.login == typed.strip()[:60] or not row.login or row.login in typed


def test_paste_duplicates_point_at_the_first_line() -> None:
    rows = parse_logins("alice\nbob\n@ALICE\nbob alice")
    assert logins(rows) == [(1, "alice", ""), (2, "bob", ""), (3, "alice", "duplicate of line 1"),
                            (4, "bob", "duplicate of line 2"), (4, "alice", "duplicate of line 1")]


def test_an_invalid_entry_does_not_count_as_the_first_of_a_login() -> None:
    rows = parse_logins("al--ice\nalice")
    assert logins(rows)[1] == (2, "alice", "")


def test_paste_limits() -> None:
    assert len(parse_logins("\n".join(f"s{i}" for i in range(MAX_ROSTER_ROWS)))) == MAX_ROSTER_ROWS
    with pytest.raises(RosterError, match=f"more than {MAX_ROSTER_ROWS} students"):
        parse_logins(" ".join(f"s{i}" for i in range(MAX_ROSTER_ROWS + 1)))
    with pytest.raises(RosterError, match="at most 1 MiB"):
        parse_logins("a" * (MAX_ROSTER_BYTES + 1))
    assert parse_logins("") == [] and parse_logins(" ,;\n\n") == []


def test_control_characters_never_reach_the_row() -> None:
    (row,) = parse_logins("evil\x1b[31m")
    assert not row.ok
    assert "\x1b" not in row.login and "\x1b" not in row.problem


# --- CSV -----------------------------------------------------------------------------------------------


def test_csv_with_all_columns_and_line_numbers() -> None:
    data = (b"Name,Login,Email,Section\r\n"
            b"Alice Adams,Alice,alice@uni.edu,L1\r\n"
            b"\r\n"
            b"\"Bob, Jr.\",@bob,,L2\r\n"
            b"\"Carol\nCarlsson\",carol,carol@uni.edu,\r\n"
            b"Dave,dave,,L1\r\n")
    rows = parse_csv(data)
    assert rows == [
        RosterRow(2, "alice", "Alice Adams", "alice@uni.edu", "L1"),
        RosterRow(4, "bob", "Bob, Jr.", "", "L2"),
        RosterRow(5, "carol", "Carol Carlsson", "carol@uni.edu", ""),  # a quoted newline spans two lines
        RosterRow(7, "dave", "Dave", "", "L1"),
    ]


@pytest.mark.parametrize("header", ["login", "LOGIN", " Login ", "github", "GitHub", "username", "User Name",
                                    "GitHub Username", "github_login", "GitHub-Handle"])
def test_csv_login_column_names(header: str) -> None:
    rows = parse_csv(f"{header},name\nalice,Alice\n".encode())
    assert [(r.login, r.name) for r in rows] == [("alice", "Alice")]


@pytest.mark.parametrize(("encoded", "delimiter"), [
    (codecs.BOM_UTF8 + "login;name\nalice;Ålice Ærø\n".encode(), ";"),
    ("login\tname\nalice\tÅlice Ærø\n".encode(), "\t"),
    ("login,name\r\nalice,Ålice Ærø\r\n".encode("utf-16"), ","),  # Excel's "Unicode text" has a BOM
])
def test_csv_encodings_and_separators(encoded: bytes, delimiter: str) -> None:
    (row,) = parse_csv(encoded)
    assert (row.login, row.name, row.problem) == ("alice", "Ålice Ærø", ""), delimiter


def test_csv_row_problems() -> None:
    data = ("login,name,email\n"
            ",Nobody,\n"
            "alice,Alice,not-an-email\n"
            f"bob,{'B' * 201},\n"
            "carol,Carol,carol@uni.edu\n"
            "CAROL,Carol again,\n"
            "x--y,,\n").encode()
    assert logins(parse_csv(data)) == [
        (2, "", "no GitHub login in this row"),
        (3, "alice", "not an email address: 'not-an-email'"),
        (4, "bob", "the name is longer than 200 characters"),
        (5, "carol", ""),
        (6, "carol", "duplicate of line 5"),
        (7, "x--y", "not a GitHub login: 'x--y' (1-39 letters, digits or single hyphens, not starting or "
                    "ending with a hyphen)"),
    ]


def test_csv_fields_lose_control_characters_and_extra_spaces() -> None:
    (row,) = parse_csv(b"login,name,section\nalice,  Alice \x07\x1b[2J  Adams ,\tL1 \n")
    assert (row.name, row.section) == ("Alice [2J Adams", "L1")


def test_csv_header_only_is_an_empty_roster() -> None:
    assert parse_csv(b"login,name\n") == []
    assert parse_csv(b"login,name\n,,\n  ,\n") == []


@pytest.mark.parametrize(("data", "message"), [
    (b"", "The file is empty"),
    (b"\n\n", "The file is empty"),
    (b"name,email\nAlice,a@uni.edu\n", "No login column: .* it has 'name', 'email'"),
    (b"alice\nbob\n", "No login column: .* it has 'alice'"),
    ("login,name\nalice,Ålice\n".encode("latin-1"), "not UTF-8 text .*CSV UTF-8"),
    (b"PK\x03\x04\x14\x00\x06\x00" + bytes(100), "spreadsheet workbook .*CSV UTF-8"),
    (b"login,name\nalice,\x00\x01\x02\n", "binary data"),
    (b"\xff\xfelogin\x00\xd8", "UTF-16 text but is not"),
    (b"login,name\nalice,\"Alice\" x\"\n" * 1, None),  # a stray quote is still readable CSV
])
def test_csv_files_that_are_not_rosters(data: bytes, message: str | None) -> None:
    if message is None:
        assert [r.login for r in parse_csv(data)] == ["alice"]
        return
    with pytest.raises(RosterError, match=message):
        parse_csv(data)


def test_csv_limits() -> None:
    header = b"login\n"
    exactly = header + b"\n".join(f"s{i}".encode() for i in range(MAX_ROSTER_ROWS)) + b"\n"
    assert len(parse_csv(exactly)) == MAX_ROSTER_ROWS
    with pytest.raises(RosterError, match=f"more than {MAX_ROSTER_ROWS} students"):
        parse_csv(exactly + b"one-more\n")
    with pytest.raises(RosterError, match=r"The file is 1\.0 MiB; a roster may be at most 1 MiB"):
        parse_csv(header + b"a" * MAX_ROSTER_BYTES)
    # A huge field is refused by the size cap before csv's own field limit could matter.
    with pytest.raises(RosterError):
        parse_csv(b"login,name\nalice,\"" + b"x" * (MAX_ROSTER_BYTES + 10) + b"\"\n")


def test_a_csv_field_larger_than_csvs_limit_is_a_clear_error() -> None:
    # csv refuses fields over 128 KiB ("field larger than field limit"): say where.
    data = b"login,name\nalice,\"" + b"x" * 200_000 + b"\"\n"
    with pytest.raises(RosterError, match="Line 2 is not valid CSV"):
        parse_csv(data)


def test_random_bytes_give_rows_or_a_roster_error_never_anything_else() -> None:
    generator = random.Random(20261123)
    alphabet = b"login,name;email\t\"\r\n\x00\xff\xfe\xef\xbb\xbfaZ9-@ "
    for _ in range(500):
        data = bytes(generator.choice(alphabet) for _ in range(generator.randint(0, 80)))
        try:
            rows = parse_csv(data)
        except RosterError as err:
            assert str(err).endswith((".", ")")), str(err)
            continue
        for row in rows:
            assert row.ok or row.problem
            assert row.line >= 2
