"""The CRD schemas in deploy/crds/ and the models in userland.platform.model.models must not drift.

Pure: no cluster. Field names are compared through a table (dataclass field -> camelCase key,
with the few deliberate renames spelled out), and behaviourally: a spec with every schema
property set is parsed by the model, and taking any one property away must change what the
model returns (or make it refuse the spec), so a schema field the model ignores fails here,
as does a model field no schema property feeds.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from userland.platform.model import assignments, grading, models, naming

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def load_crd(name: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((CRDS / f"{name}.userland.dev.yaml").read_text())
    return crd


def version(crd: dict[str, Any]) -> dict[str, Any]:
    (v1alpha1,) = [v for v in crd["spec"]["versions"] if v["name"] == naming.VERSION]
    return v1alpha1  # type: ignore[no-any-return]


def schema_of(crd_name: str) -> dict[str, Any]:
    return version(load_crd(crd_name))["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


TEMPLATE = schema_of("templates")
USERLAND = schema_of("userlands")
ASSIGNMENT = schema_of("assignments")
SCHEMA_NAMES = {id(TEMPLATE): "Template", id(USERLAND): "Userland", id(ASSIGNMENT): "Assignment"}


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The sub-schema at a dotted path; `[]` steps into array items, `{}` into a map's values."""
    node = schema
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        elif part == "{}":
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def required_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


# dataclass <-> schema object; renames are deliberate differences between the two names.
MODEL_TABLE: list[tuple[type, dict[str, Any], str, dict[str, str]]] = [
    (models.TemplateSpec, TEMPLATE, "spec", {"idle_timeout_seconds": "idleTimeout"}),
    (models.Routing, TEMPLATE, "spec.routing", {}),
    (models.Storage, TEMPLATE, "spec.storage", {}),
    (models.UserlandSpec, USERLAND, "spec", {}),
    (models.Condition, USERLAND, "status.conditions.[]", {}),
    (models.Condition, TEMPLATE, "status.conditions.[]", {}),
    (assignments.AssignmentSpec, ASSIGNMENT, "spec", {}),
    (assignments.Source, ASSIGNMENT, "spec.source", {}),
    (assignments.SecretRef, ASSIGNMENT, "spec.source.tokenSecret", {}),
    (assignments.Grade, ASSIGNMENT, "spec.grades.{}", {}),
]
TABLE_IDS = [f"{cls.__name__}<->{SCHEMA_NAMES[id(s)]}.{p}" for cls, s, p, _ in MODEL_TABLE]


def schema_key(field_name: str, renames: dict[str, str]) -> str:
    return renames.get(field_name, camel(field_name))


@pytest.mark.parametrize(("cls", "schema", "path", "renames"), MODEL_TABLE, ids=TABLE_IDS)
def test_field_names_agree(cls: type, schema: dict[str, Any], path: str,
                           renames: dict[str, str]) -> None:
    from_model = {schema_key(f.name, renames) for f in dataclasses.fields(cls)}
    from_schema = set(at(schema, path)["properties"])
    assert from_schema - from_model == set(), f"in the {path} schema but not in {cls.__name__}"
    assert from_model - from_schema == set(), f"in {cls.__name__} but not in the {path} schema"


@pytest.mark.parametrize(("cls", "schema", "path", "renames"), MODEL_TABLE, ids=TABLE_IDS)
def test_required_fields_agree(cls: type, schema: dict[str, Any], path: str,
                               renames: dict[str, str]) -> None:
    from_model = {schema_key(name, renames) for name in required_fields(cls)}
    assert set(at(schema, path).get("required", [])) == from_model


@pytest.mark.parametrize(("cls", "schema", "path", "renames"), MODEL_TABLE, ids=TABLE_IDS)
def test_defaults_agree(cls: type, schema: dict[str, Any], path: str,
                        renames: dict[str, str]) -> None:
    props = at(schema, path)["properties"]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = schema_key(f.name, renames)
        if "default" in props[key]:
            assert props[key]["default"] == f.default, f"default of {path}.{key}"
        # Booleans and enums with a model default must let the API server show it too.
        if hints[f.name] is bool or (typing.get_origin(hints[f.name]) is typing.Literal
                                     and f.default is not dataclasses.MISSING):
            assert props[key].get("default") == f.default, f"{path}.{key} needs default {f.default!r}"


@pytest.mark.parametrize(("literal", "schema", "path"), [
    (models.Phase, USERLAND, "status.phase"),
    (models.ReclaimPolicy, TEMPLATE, "spec.storage.reclaimPolicy"),
    (models.WebSocketProtocol, TEMPLATE, "spec.activity.webSocketProtocol"),
    (typing.get_type_hints(models.Condition)["status"], USERLAND, "status.conditions.[].status"),
    (typing.get_type_hints(models.Condition)["status"], TEMPLATE, "status.conditions.[].status"),
], ids=["Phase", "ReclaimPolicy", "WebSocketProtocol", "Userland-condition-status",
        "Template-condition-status"])
def test_enums_agree_with_literals(literal: Any, schema: dict[str, Any], path: str) -> None:
    assert at(schema, path)["enum"] == list(typing.get_args(literal))


def test_condition_to_dict_writes_exactly_the_schema_keys() -> None:
    written = models.Condition("Ready", "True", "Available", "ok").to_dict()
    assert set(written) == set(at(USERLAND, "status.conditions.[]")["properties"])


# --- behaviour: every schema property is read by the model, every model field is fed ---------

# One sample per schema leaf (a non-default value). A new schema property needs a sample here.
TEMPLATE_SAMPLES: dict[str, Any] = {
    "spec.displayName": "VS Code",
    "spec.description": "Browser IDE",
    "spec.routing.host": "ide.example.edu",
    "spec.routing.pathPrefix": "/ide/",
    "spec.port": 8080,
    "spec.podSpec": {"containers": [{"name": "code", "image": "codercom/code-server"}]},
    "spec.storage.size": "2Gi",
    "spec.storage.mountPath": "/home/coder",
    "spec.storage.storageClassName": "fast",
    "spec.storage.reclaimPolicy": "Delete",
    "spec.idleTimeout": "1h30m",
    "spec.selfService": True,
    "spec.activity.backgroundPaths": ["/api/kernels*"],
    "spec.activity.quietFrameBytes": 13,
    "spec.activity.webSocketProtocol": "vscode",
    "spec.schedule.timeZone": "Europe/Berlin",
    "spec.schedule.wakeBefore": "15m",
    "spec.schedule.lectures": [{"days": ["Mon", "Wed"], "start": "09:15", "end": "10:45"}],
}
USERLAND_SAMPLES: dict[str, Any] = {
    "spec.user": "koba1t",
    "spec.template": "vscode",
    "spec.suspended": True,
}
ASSIGNMENT_SAMPLES: dict[str, Any] = {
    "spec.title": "Week 1",
    "spec.templates": ["jupyterlab", "vscode"],
    "spec.source.url": "https://git.example.edu/course/week1.git",
    "spec.source.ref": "v1",
    "spec.source.subPath": "starter",
    "spec.source.tokenSecret.name": "course-git",
    "spec.source.tokenSecret.key": "pat",
    "spec.path": "week1",
    "spec.release": "2026-12-01T08:00:00Z",
    "spec.due": "2026-12-07T23:59:00Z",
    "spec.students": ["alice", "bob"],
    "spec.extensions": {"bob": "2026-12-09T23:59:00Z"},
    "spec.grades": {"alice": {"grade": "9/10", "comment": "Good"}},
    "spec.returnFeedback": True,
    "spec.grader.image": "registry.example.edu/course/grader:1",
    "spec.grader.command": ["/autograder/source/run.sh"],
    "spec.grader.args": ["--verbose"],
    "spec.grader.env": [{"name": "LANG", "value": "C.UTF-8"}],
    "spec.grader.resources.limits": {"memory": "2Gi"},
    "spec.grader.resources.requests": {"cpu": "500m"},
    "spec.grader.tests.path": "grading",
    "spec.grader.tests.repository.url": "https://git.example.edu/course/tests.git",
    "spec.grader.tests.repository.ref": "v2",
    "spec.grader.tests.repository.tokenSecret.name": "course-github",
    "spec.grader.tests.repository.tokenSecret.key": "pat",
    "spec.grader.timeLimit": "2m",
    "spec.grader.maxScore": 10,
}


def object_paths(node: dict[str, Any], prefix: str) -> list[str]:
    """Dotted paths of every property under `node` (objects and leaves), parents first.

    An object that preserves unknown fields (podSpec) is opaque here: a leaf.
    """
    paths = []
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}"
        paths.append(path)
        if is_record(sub):
            paths.extend(object_paths(sub, path))
    return paths


def is_record(node: dict[str, Any]) -> bool:
    """An object with named properties (a map, such as grades, or an opaque object is a leaf)."""
    return node.get("type") == "object" and "properties" in node and not node.get(
        "x-kubernetes-preserve-unknown-fields")


def build_sample(schema: dict[str, Any], samples: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for path in object_paths(schema["properties"]["spec"], "spec"):
        if is_record(at(schema, path)):
            continue
        assert path in samples, f"schema property {path} has no sample in this test: add one"
        node = obj
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(samples[path])
    assert set(samples) <= {p for p in object_paths(schema["properties"]["spec"], "spec")}, (
        "a sample names a property the schema does not have")
    return obj


def without(obj: dict[str, Any], path: str) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    node = result
    *parents, leaf = path.split(".")
    for part in parents:
        node = node[part]
    del node[leaf]
    return result


def parse_template(obj: dict[str, Any]) -> models.Template:
    return models.Template.from_object({"metadata": {"name": "vscode", "namespace": "c"}, **obj})


def parse_userland(obj: dict[str, Any]) -> models.Userland:
    return models.Userland.from_object({"metadata": {"name": "vscode-koba1t", "namespace": "c"}, **obj})


def parse_assignment(obj: dict[str, Any]) -> assignments.Assignment:
    return assignments.Assignment.from_object({"metadata": {"name": "week1", "namespace": "c"}, **obj})


PARSERS = [
    ("Template", TEMPLATE, TEMPLATE_SAMPLES, parse_template),
    ("Userland", USERLAND, USERLAND_SAMPLES, parse_userland),
    ("Assignment", ASSIGNMENT, ASSIGNMENT_SAMPLES, parse_assignment),
]


@pytest.mark.parametrize(("kind", "schema", "samples", "parse"), PARSERS, ids=[p[0] for p in PARSERS])
def test_every_schema_property_is_read_by_the_model(kind: str, schema: dict[str, Any],
                                                    samples: dict[str, Any], parse: Any) -> None:
    full = build_sample(schema, samples)
    parsed = parse(full).spec
    for path in object_paths(schema["properties"]["spec"], "spec"):
        try:
            reduced = parse(without(full, path)).spec
        except models.InvalidSpec:
            continue  # the model needs it: it is read
        assert reduced != parsed, f"{kind} {path} is in the schema but the model ignores it"


def test_every_grader_property_is_read_by_the_grader_parser() -> None:
    """spec.grader is kept as written by the Assignment model and read by platform/model/grading.py:
    taking any one of its properties away changes the grader read (or makes it a problem)."""
    full = build_sample(ASSIGNMENT, ASSIGNMENT_SAMPLES)
    source = parse_assignment(full).spec.source
    read = grading.parse_grader(full["spec"]["grader"], source)
    assert isinstance(read, grading.Grader), read
    for path in object_paths(at(ASSIGNMENT, "spec.grader"), "spec.grader"):
        reduced = grading.parse_grader(without(full, path)["spec"].get("grader"), source)
        assert reduced != read, f"{path} is in the schema but the grader ignores it"


def _dataclass_leaves(value: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(path, value, default) for every field of a parsed spec, nested dataclasses included."""
    leaves = []
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if dataclasses.is_dataclass(current):
            leaves.extend(_dataclass_leaves(current, f"{prefix}.{f.name}"))
        else:
            default = None if f.default is dataclasses.MISSING else f.default
            leaves.append((f"{prefix}.{f.name}", current, default))
    return leaves


@pytest.mark.parametrize(("kind", "schema", "samples", "parse"), PARSERS, ids=[p[0] for p in PARSERS])
def test_every_model_field_is_fed_by_a_schema_property(kind: str, schema: dict[str, Any],
                                                       samples: dict[str, Any], parse: Any) -> None:
    parsed = parse(build_sample(schema, samples)).spec
    for path, value, default in _dataclass_leaves(parsed, "spec"):
        assert value is not None and value != default, (
            f"{kind} model field {path} kept its default: no schema property sets it")


# --- patterns: the API server and the models refuse the same values ---------------------------

LOGIN = at(USERLAND, "spec.user")
# Go's regexp (RE2) has no look-around or back-references; such a pattern makes the API server
# refuse *every* value ("pattern is invalid"), so the schema must not use one.
RE2_UNSUPPORTED = re.compile(r"\(\?[=!<>]|\(\?P=|\\[1-9]")


def schema_accepts_login(login: str) -> bool:
    # fullmatch: Go's `$` is the end of the text, Python's also matches before a final "\n".
    return (LOGIN["minLength"] <= len(login) <= LOGIN["maxLength"]
            and re.fullmatch(LOGIN["pattern"], login) is not None)


def test_login_schema_is_re2_and_bounded_like_github() -> None:
    assert not RE2_UNSUPPORTED.search(LOGIN["pattern"])
    assert (LOGIN["minLength"], LOGIN["maxLength"]) == (1, 39)


LOGIN_CASES = [
    "a", "A", "0", "koba1t", "Koba1T", "a-b", "a-b-c", "a" * 39, "a-" * 19 + "a", "ab" * 19 + "a",
    "", "-", "-a", "a-", "a--b", "a" * 40, "a-" * 19 + "ab", "has space", "a_b", "a.b", "é",
    "a/b", "a\tb",
]
# Every string up to 5 characters over a small alphabet: hyphens in every position.
EXHAUSTIVE = ["".join(p) for n in range(6) for p in itertools.product("aZ0-", repeat=n)]


@pytest.mark.parametrize("login", LOGIN_CASES)
def test_login_schema_and_naming_agree(login: str) -> None:
    assert schema_accepts_login(login) == naming.is_valid_login(login)


def test_login_schema_and_naming_agree_exhaustively() -> None:
    disagree = [s for s in EXHAUSTIVE if schema_accepts_login(s) != naming.is_valid_login(s)]
    assert disagree == []


def test_login_with_trailing_newline_is_refused_by_naming_like_the_schema() -> None:
    assert schema_accepts_login("koba1t\n") is False
    assert naming.is_valid_login("koba1t\n") is False


def test_login_pattern_is_the_naming_one() -> None:
    assert LOGIN["pattern"] == naming.LOGIN_PATTERN
    assert LOGIN["maxLength"] == naming.LOGIN_MAX


def test_template_name_pattern_is_the_naming_one() -> None:
    template = at(USERLAND, "spec.template")
    assert template["pattern"] == naming.DNS_LABEL_PATTERN
    assert template["maxLength"] == naming.TEMPLATE_NAME_MAX


def test_value_patterns_are_the_models_ones() -> None:
    assert at(TEMPLATE, "spec.storage.size")["pattern"] == models._QUANTITY_RE.pattern
    assert at(TEMPLATE, "spec.idleTimeout")["pattern"] == models._DURATION_RE.pattern
    assert at(TEMPLATE, "spec.routing.pathPrefix")["pattern"] == "^/"


@pytest.mark.parametrize("pattern_path", [
    (TEMPLATE, "spec.storage.size"), (TEMPLATE, "spec.idleTimeout"),
    (TEMPLATE, "spec.routing.pathPrefix"), (TEMPLATE, "spec.storage.mountPath"),
    (USERLAND, "spec.template"), (USERLAND, "spec.user"),
    (ASSIGNMENT, "spec.templates.[]"), (ASSIGNMENT, "spec.students.[]"), (ASSIGNMENT, "spec.source.url"),
], ids=lambda p: p[1])
def test_every_pattern_is_re2(pattern_path: tuple[dict[str, Any], str]) -> None:
    schema, path = pattern_path
    assert not RE2_UNSUPPORTED.search(at(schema, path)["pattern"])


# --- shape of the CRDs --------------------------------------------------------------------------


def all_schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = []
    for key, sub in node.get("properties", {}).items():
        nodes.append((f"{path}.{key}".lstrip("."), sub))
        nodes.extend(all_schema_nodes(sub, f"{path}.{key}"))
    if "items" in node:
        nodes.append((f"{path}[]", node["items"]))
        nodes.extend(all_schema_nodes(node["items"], f"{path}[]"))
    return nodes


@pytest.mark.parametrize("schema", [TEMPLATE, USERLAND, ASSIGNMENT],
                         ids=["Template", "Userland", "Assignment"])
def test_every_property_has_a_description_and_a_type(schema: dict[str, Any]) -> None:
    nodes = all_schema_nodes(schema)
    assert len(nodes) > 10
    # The API server refuses anything but `type: object` for metadata (it is ObjectMeta).
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in nodes:
        if path == "metadata":
            continue
        assert node.get("description", "").strip(), f"{path} has no description"
        assert node.get("type") in ("object", "string", "integer", "number", "boolean", "array"), path


@pytest.mark.parametrize(("name", "kind", "short"), [("templates", "Template", "tpl"),
                                                     ("userlands", "Userland", "ul"),
                                                     ("assignments", "Assignment", "asg")])
def test_crd_identity(name: str, kind: str, short: str) -> None:
    crd = load_crd(name)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{name}.{naming.GROUP}"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == (naming.GROUP, "Namespaced")
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == name
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == ["classroom"]
    (v,) = spec["versions"]
    assert (v["name"], v["served"], v["storage"]) == (naming.VERSION, True, True)
    assert v["subresources"] == {"status": {}}


READY = '.status.conditions[?(@.type=="Ready")].status'


@pytest.mark.parametrize(("name", "columns"), [
    ("userlands", [("User", ".spec.user"), ("Template", ".spec.template"),
                   ("Phase", ".status.phase"), ("Ready", READY),
                   ("Age", ".metadata.creationTimestamp")]),
    ("templates", [("Display Name", ".spec.displayName"), ("Port", ".spec.port"),
                   ("Userlands", ".status.userlands"), ("Valid", READY),
                   ("Age", ".metadata.creationTimestamp")]),
    ("assignments", [("Title", ".spec.title"), ("Due", ".spec.due"), ("Handed out", ".status.handedOut"),
                     ("Collected", ".status.collected"), ("Phase", ".status.phase"),
                     ("Age", ".metadata.creationTimestamp")]),
])
def test_printer_columns(name: str, columns: list[tuple[str, str]]) -> None:
    printed = version(load_crd(name))["additionalPrinterColumns"]
    default_columns = [(c["name"], c["jsonPath"]) for c in printed if not c.get("priority")]
    assert default_columns == columns


def test_assignment_patterns_are_the_naming_ones() -> None:
    assert at(ASSIGNMENT, "spec.templates.[]")["pattern"] == naming.DNS_LABEL_PATTERN
    assert at(ASSIGNMENT, "spec.students.[]")["pattern"] == naming.LOGIN_PATTERN
    assert at(ASSIGNMENT, "spec.students.[]")["maxLength"] == naming.LOGIN_MAX
    assert at(ASSIGNMENT, "spec.title")["maxLength"] == assignments.TITLE_MAX
    assert at(ASSIGNMENT, "spec.path")["maxLength"] == assignments.PATH_MAX
    assert at(ASSIGNMENT, "spec.grades.{}.grade")["maxLength"] == assignments.GRADE_MAX
    assert at(ASSIGNMENT, "spec.grades.{}.comment")["maxLength"] == assignments.COMMENT_MAX
    assert at(ASSIGNMENT, "spec.students")["maxItems"] == assignments.STUDENTS_MAX
    assert at(ASSIGNMENT, "spec.templates")["maxItems"] == assignments.TEMPLATES_MAX
