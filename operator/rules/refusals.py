"""The API server's refusal of a Deployment made from a Template, told in the Template's terms.

The operator builds each Deployment's `spec.template.spec` from the Template's `spec.podSpec`,
so an admin reads `spec.podSpec.containers[0].resources.limits.memory`, not the Deployment's
path, and not the name of the dry-run object. A decoder error (400) does not say which list
item held the bad value (`containers[]`); the Template does: the item whose field has it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

POD_SPEC = "spec.template.spec."
_IS_INVALID = re.compile(r'^\w+(?:\.[\w.]+)? "[^"]*" is invalid: ')


def _locate(node: Any, parts: list[str], value: Any, done: str = "") -> Iterator[str]:
    """Concrete paths (`containers[1].resources.limits.memory`) under `node` holding `value`."""
    if not parts:
        if node == value:
            yield done
        return
    part, rest = parts[0], parts[1:]
    name, brackets = part.split("[", 1) if "[" in part else (part, "")
    if not isinstance(node, dict) or name not in node:
        return
    children: list[tuple[str, Any]] = [(f"{done}.{name}" if done else name, node[name])]
    for _ in range(brackets.count("]")):
        children = [(f"{path}[{i}]", item) for path, items in children if isinstance(items, list)
                    for i, item in enumerate(items)]
    for path, child in children:
        yield from _locate(child, rest, value, path)


def podspec_refusal(message: str, pod_spec: dict[str, Any], *, field: str | None = None,
                    value: str | None = None) -> str:
    """What to put in the Template's and its Userlands' Ready condition."""
    text = _IS_INVALID.sub("", message)
    if field and field.startswith(POD_SPEC) and "[]" in field and value is not None:
        try:
            wanted = json.loads(value)
        except ValueError:
            wanted = None
        found = next(_locate(pod_spec, field[len(POD_SPEC):].split("."), wanted), None)
        if found is not None:
            text = text.replace(field, POD_SPEC + found, 1)
    return "the API server refused it: " + text.replace(POD_SPEC, "spec.podSpec.")
