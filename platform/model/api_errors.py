"""The API server's decoder errors, in words a person can act on (pure; used at the I/O edge).

A value of the wrong shape in a typed object (`memory: 1Gb`, `containerPort: "http"`) is not a
422 with a field path: the API server cannot even decode the body and answers 400 with its JSON
decoder's trace, such as

    Deployment in version "v1" cannot be handled as a Deployment: v1.Deployment.Spec:
    v1.DeploymentSpec.Template: ... v1.ResourceRequirements.Limits: unmarshalerDecoder:
    quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$',
    error found in #10 byte of ...|ory":"1Gb"}}}]}}}}|..., bigger context ...|...|...

`explain_decode_error` turns that into the field (`spec.template.spec.containers[].resources.
limits.memory`; `[]` where the trace does not say which item), the value (`"1Gb"`) and what to
write instead. Anything it does not recognise keeps the API server's words, without the byte dump.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_HANDLED = re.compile(r"^(?P<what>.+?) cannot be handled as an? (?P<kind>\w+): (?P<trace>.*)$", re.DOTALL)
# A step of the decoder's path: `v1.PodSpec.Containers`, `[]v1.Container`, `map[string]v1.X`.
_STEP = re.compile(r"^(?P<list>(?:\[\])+)?(?:map\[[^\]]*\])?(?:[\w]+\.)+(?P<field>\w+)$")
_WHERE = re.compile(r", error found in #(?P<at>\d+) byte of \.\.\.\|(?P<near>.*?)\|\.\.\.(?:, bigger context "
                    r"\.\.\.\|(?P<context>.*?)\|\.\.\.)?\s*$", re.DOTALL)
_KEY = re.compile(r'"(?P<key>(?:[^"\\]|\\.)*)"\s*:\s*')
_UNIT = re.compile(r"^\s*[+-]?[0-9.]+\s*(?P<unit>[A-Za-z]+)\s*$")
# Units people write for bytes, and the Kubernetes ones they mean (binary: Ki = 1024).
_UNIT_FIXES = {"kb": "Ki", "kib": "Ki", "mb": "Mi", "mib": "Mi", "gb": "Gi", "gib": "Gi", "tb": "Ti",
               "tib": "Ti", "b": "(no unit: a plain number of bytes)"}

QUANTITY_HELP = "write a number and a unit such as 512Mi, 2Gi (memory, storage) or 500m (CPU)"


@dataclass(frozen=True)
class DecodeError:
    field: str         # such as spec.template.spec.containers[].resources.limits.memory
    value: str | None  # the offending value as JSON (`"1Gb"`), when the trace shows it
    problem: str       # what is wrong and what to write instead

    @property
    def message(self) -> str:
        shown = f" {self.value}" if self.value is not None else ""
        return f"{self.field}:{shown} {self.problem}"


# Go fields whose JSON name is not the camel-cased Go name: embedded structs are inline (None).
_JSON_NAMES: dict[str, str | None] = {"Handler": None, "ProbeHandler": None, "VolumeSource": None,
                                      "PersistentVolumeSource": None, "TypeMeta": None,
                                      "ObjectMeta": "metadata", "ListMeta": "metadata"}


def _json_name(go_field: str) -> str | None:
    """Go field name to its JSON name: `Limits` -> `limits`, `HTTPGet` -> `httpGet`; None for
    an embedded struct, whose fields are inline."""
    if go_field in _JSON_NAMES:
        return _JSON_NAMES[go_field]
    run = re.match(r"^[A-Z]+", go_field)
    if run is None:
        return go_field
    caps = run.group(0)
    if len(caps) > 1 and len(caps) < len(go_field):
        caps = caps[:-1]  # the last capital starts the next word: HTTPGet -> http + Get
    return caps.lower() + go_field[len(caps):]


def _last_pair(text: str, cut: int) -> tuple[str | None, str | None]:
    """The last `"key": value` that starts before `cut` (where the decoder stopped: after the
    value, or inside it), with the value as JSON when it can be read whole."""
    keys = [m for m in _KEY.finditer(text) if m.start() < cut]
    if not keys:
        return None, None
    last = keys[-1]
    try:
        value, _ = json.JSONDecoder().raw_decode(text, last.end())
    except ValueError:
        return last.group("key"), None
    if isinstance(value, dict | list):
        return last.group("key"), None  # shown by its field; its text may be cut off anyway
    return last.group("key"), json.dumps(value)


def _quantity_problem(value: str | None) -> str:
    problem = f"is not a valid quantity: {QUANTITY_HELP}"
    try:
        text = json.loads(value) if value is not None else None
    except ValueError:
        text = None
    if isinstance(text, str) and " " in text.strip():
        problem += " (no space between the number and the unit)"
    elif isinstance(text, str) and (unit := _UNIT.match(text)) is not None:
        fix = _UNIT_FIXES.get(unit.group("unit").lower())
        if fix is not None and fix.startswith("("):
            problem += f' ("{unit.group("unit")}" is not a unit {fix})'
        elif fix is not None:
            number = text.strip()[: -len(unit.group("unit"))].strip()
            problem += f' ("{unit.group("unit")}" is not a unit: did you mean "{number}{fix}"?)'
    return problem


def _problem(error: str, value: str | None) -> str:
    lowered = error.lower()
    if "quantities must match" in lowered:
        return _quantity_problem(value)
    if re.search(r"readu?int\d*|readfloat|expects? number|readnumber", lowered):
        return "must be a number"
    if "readstring" in lowered:
        return "must be text (a string in quotes)"
    if "readbool" in lowered:
        return "must be true or false"
    if "readarray" in lowered or "decode slice" in lowered:
        return "must be a list"
    if "readmap" in lowered or "readobject" in lowered:
        return "must be an object (key: value pairs)"
    return f"cannot be read: {error.strip()}"


def explain_decode_error(message: str) -> DecodeError | None:
    """The field, value and remedy of a 400 "cannot be handled as a ..." message; None otherwise."""
    handled = _HANDLED.match(message.strip())
    if handled is None:
        return None
    trace = handled.group("trace")
    near = context = None
    at = 0
    if (where := _WHERE.search(trace)) is not None:
        near, context, at = where.group("near"), where.group("context"), int(where.group("at"))
        trace = trace[: where.start()]
    path: list[str] = []
    steps = trace.split(": ")
    error_from = len(steps)
    for index, step in enumerate(steps):
        matched = _STEP.match(step.strip())
        if matched is None:
            error_from = index
            break
        if matched.group("list") and path:
            path[-1] += "[]"
        if not matched.group("list") and (name := _json_name(matched.group("field"))) is not None:
            path.append(name)
    error = ": ".join(s for s in steps[error_from:] if s.strip() != "unmarshalerDecoder")
    key = value = None
    if near is not None:
        # The bigger context shows the key before the value; the error is `at` bytes into `near`.
        in_context = bool(context) and near in str(context)
        text = str(context) if in_context else near
        cut = text.index(near) + at if in_context else at
        key, value = _last_pair(text, cut)
    if key and (not path or path[-1].removesuffix("[]") != key):
        path.append(key)
    if not path:
        return None
    return DecodeError(field=".".join(path), value=value, problem=_problem(error, value))


def readable(message: str) -> str:
    """A 400's message as a person can act on it (unchanged when it is not a decoder error)."""
    explained = explain_decode_error(message)
    if explained is not None:
        return explained.message
    # At least drop the byte dump from what is left.
    return re.sub(r", error found in #\d+ byte of \.\.\.\|.*$", "", message, flags=re.DOTALL)
