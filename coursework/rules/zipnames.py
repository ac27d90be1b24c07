r"""The names of the class zip's entries: what a student named a file, as every teacher's computer
can extract it, one file for one entry (pure: no I/O).

A student's Linux folder allows names a teacher's unzip cannot take, or takes as another:

- `\` (a folder separator to Windows' zip tools: `..\..\evil.bat` climbs out), `:` (a drive or a
  stream there), `<>"|?*` (refused by Windows), a control character or a bidi control
  (`invoice\u202efdp.exe` shows as "invoiceexe.pdf"), a trailing dot or space (Windows drops
  it: `notes.` becomes `notes`), a device name (`CON.txt` opens the console on Windows): each is
  written percent-encoded as its UTF-8 bytes, and so is `%` itself, so that the escape is
  reversible and two names never become one (`a\b.txt` is `a%5Cb.txt`, `a%5Cb.txt` is
  `a%255Cb.txt`);
- a part that escaping made longer than 255 bytes (255 `%` are 765 bytes escaped) is shortened
  and marked with a digest of the student's name (`%~` and 16 hex digits): no file system takes
  a longer name, and extracting stopped at the entry, losing every student after it;
- names that differ only in case or in Unicode normalization (`Main.java` and `main.java`, `é`
  composed and decomposed) are two files on Linux and one on macOS and Windows, where the later
  silently replaced the earlier: each name after the first such is marked `%~2`, `%~3`...

`%~` never comes out of the escaping (`~` is no hex digit), so a marked name is never a
student's own, escaped.
"""

from __future__ import annotations

import hashlib
import unicodedata

# Written percent-encoded (with controls and bidi controls, and see `part`).
ESCAPED = frozenset('%\\:<>"|?*')
# Names Windows keeps for devices, whatever the extension (`con.txt` too).
DEVICES = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))})
MAX_PART_BYTES = 255
MARK = "%~"
# The extension kept when a name is shortened or marked, if it is this short (`.ipynb` is).
MAX_KEPT_EXTENSION = 16


def part(text: str) -> str:
    """One part of a path, escaped: see the module's doc."""
    escaped = "".join(_escaped(c) if c in ESCAPED or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")
                      else c for c in text)
    kept = escaped.rstrip(". ")
    escaped = kept + "".join(_escaped(c) for c in escaped[len(kept):])
    if escaped.split(".")[0].upper() in DEVICES:
        escaped = _escaped(escaped[0]) + escaped[1:]
    if len(escaped.encode()) > MAX_PART_BYTES:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        escaped = marked(escaped, MARK + digest)
    return escaped


def marked(escaped: str, mark: str) -> str:
    """`escaped` with `mark` before its extension, shortened to fit 255 bytes (never cut inside
    a `%XX` escape)."""
    dot = escaped.rfind(".")
    extension = escaped[dot:] if dot > 0 and len(escaped) - dot <= MAX_KEPT_EXTENSION else ""
    stem = escaped[:len(escaped) - len(extension)]
    room = MAX_PART_BYTES - len((mark + extension).encode())
    while len(stem.encode()) > room:
        stem = stem[:-1]
    if "%" in stem[-2:]:  # a cut escape: drop what is left of it
        stem = stem[:stem.rindex("%", len(stem) - 2)]
    return stem + mark + extension


def folded(path: str) -> str:
    """A path as macOS and Windows tell names apart: without case, Unicode's canonical forms one
    (canonical caseless matching; a little stricter than either system, never looser)."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", path).casefold())


def _escaped(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))


class EntryNames:
    """The names of one zip's entries, no two the same to a case-insensitive, normalization-
    insensitive file system. Feed them in the order they are written: the first of two names
    that are the same there keeps its name, the later one is marked. A folder is one folder
    for all the files in it (renamed once, if at all)."""

    def __init__(self) -> None:
        self._taken: set[str] = set()  # folded paths of the files and folders named so far
        self._folders: dict[tuple[str, str], str] = {}  # (parent as written, part as given) -> as written
        # The last number given to names folding onto one: 16,384 case spellings of one 14-letter
        # name (a student's to make) must not cost the store 16,384 tries for each.
        self._numbered: dict[str, int] = {}

    def name(self, prefix: str, path: str) -> str:
        """The entry's name for a student's `path` below `prefix` (ours: `alice/`, trusted)."""
        written = prefix.rstrip("/")
        parts = path.split("/")
        for i, given in enumerate(parts):
            folder = i < len(parts) - 1
            if folder and (written, given) in self._folders:
                written = self._folders[(written, given)]
                continue
            base = part(given)
            candidate = base
            if folded(f"{written}/{candidate}") in self._taken:
                key = folded(f"{written}/{base}")
                number = self._numbered.get(key, 1)
                while folded(f"{written}/{candidate}") in self._taken:
                    number += 1
                    candidate = marked(base, f"{MARK}{number}")
                self._numbered[key] = number
            self._taken.add(folded(f"{written}/{candidate}"))
            if folder:
                self._folders[(written, given)] = f"{written}/{candidate}"
            written = f"{written}/{candidate}"
        return written
