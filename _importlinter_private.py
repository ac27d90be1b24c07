"""An import-linter contract type: a third-party package's private modules, only where allowed.

import-linter sees a third-party package as one module (`aiohttp`, never `aiohttp.client_proto`),
so its `forbidden` contracts cannot tell aiohttp's public API from its internals. This contract
reads the import lines themselves: every `import`/`from ... import` of `package` by the project's
modules must name one of the `public` modules, except in the `allowed_importers`, which must each
still import something private (else the allowance, and the pin comment in pyproject.toml that
names them, have gone stale). Configured in pyproject.toml (`[tool.importlinter]`); kopf confines
its third-party clients with a contract of its own the same way (`_importlinter_conditional.py`).
"""

from __future__ import annotations

import re
from typing import Any

from importlinter import Contract, ContractCheck, fields, output

_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\b")
_IMPORT = re.compile(r"^\s*import\s+(.+)$")


def imported_modules(line: str, package: str) -> list[str]:
    """The modules of `package` an import line names (`from aiohttp.web import x` -> aiohttp.web)."""
    found = _FROM.match(line)
    if found:
        names = [found.group(1)]
    else:
        plain = _IMPORT.match(line)
        names = [part.split(" as ")[0].strip() for part in plain.group(1).split(",")] if plain else []
    return [n for n in names if n == package or n.startswith(package + ".")]


class PrivateSubmodulesContract(Contract):
    type_name = "private_submodules"

    package = fields.StringField()
    public = fields.ListField(subfield=fields.StringField())
    allowed_importers = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        package = str(self.package)
        public = {str(p) for p in self.public}  # type: ignore[attr-defined]
        allowed = {m.name for m in self.allowed_importers}  # type: ignore[attr-defined]
        failed: list[dict[str, Any]] = []
        using: set[str] = set()
        for importer in sorted(graph.find_modules_that_directly_import(package)):
            for detail in graph.get_import_details(importer=importer, imported=package):
                for module in imported_modules(detail["line_contents"], package):
                    if module in public:
                        continue
                    if importer in allowed:
                        using.add(importer)
                        continue
                    failed.append({**detail, "module": module})
        stale = sorted(allowed - using)
        return ContractCheck(kept=not failed and not stale, metadata={"failed": failed, "stale": stale})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for detail in check.metadata["failed"]:
            output.print_error(f"{detail['importer']} imports {detail['module']}, a private module of "
                               f"{self.package}:", bold=True)
            output.new_line()
            output.indent_cursor()
            output.print_error(f"{detail['importer']}:{detail['line_number']}: {detail['line_contents']}")
            output.new_line()
        for importer in check.metadata["stale"]:
            output.print_error(f"{importer} is allowed {self.package}'s private modules but uses none: "
                               "remove it from allowed_importers and from the pin comment in pyproject.toml",
                               bold=True)
            output.new_line()
