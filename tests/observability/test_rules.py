"""The alert and recording rules, their runbooks, the dashboards and the kustomize component.

Real: Debian's promtool (`check rules`, and `test rules` with the unit tests in rules/: every
alert fires when it should and stays quiet otherwise), kubectl's kustomize. What promtool
cannot see is checked here: every alert has a firing and a quiet test, a severity, a runbook
with its three parts; every metric the rules and dashboards read is documented; the generated
files (dashboards, PrometheusRule) agree with their sources.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "deploy" / "observability"
RULE_FILES = sorted((OBSERVABILITY / "rules").glob("*.yaml"))
TESTS = sorted((Path(__file__).parent / "rules").glob("*.test.yaml"))
DASHBOARDS = sorted((OBSERVABILITY / "dashboards").glob("*.json"))
RUNBOOKS = REPO / "docs" / "runbooks"
METRICS_DOC = (REPO / "docs" / "metrics.md").read_text()
SLO_DOC = (REPO / "docs" / "slo.md").read_text()
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def rules() -> list[dict[str, Any]]:
    return [rule for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_each_rule_file(path: Path) -> None:
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", *map(str, TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(TESTS)


def test_promtool_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """The unit tests can fail: the same input, a wrong expectation, is refused."""
    test = yaml.safe_load(TESTS[0].read_text())
    test["rule_files"] = [str((TESTS[0].parent / f).resolve()) for f in test["rule_files"]]
    case = next(t for t in test["tests"] if any(a.get("exp_alerts") for a in t.get("alert_rule_test", [])))
    for check in case["alert_rule_test"]:
        check["exp_alerts"] = []
    test["tests"] = [case]
    (tmp_path / "wrong.test.yaml").write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", str(tmp_path / "wrong.test.yaml"))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def _checks() -> list[dict[str, Any]]:
    return [check for path in TESTS for test in yaml.safe_load(path.read_text())["tests"]
            for check in test.get("alert_rule_test", [])]


@pytest.mark.parametrize("name", sorted({a["alert"] for a in alerts()}))
def test_every_alert_is_tested_firing_and_quiet(name: str) -> None:
    checks = [c for c in _checks() if c["alertname"] == name]
    assert any(c.get("exp_alerts") for c in checks), f"{name}: no test where it fires"
    assert any(not c.get("exp_alerts") for c in checks), f"{name}: no test where it stays quiet"
    # Every rule of that name (a severity each) fires in some test.
    fired = {a["exp_labels"]["severity"] for c in checks for a in c.get("exp_alerts") or []}
    assert fired == {a["labels"]["severity"] for a in alerts() if a["alert"] == name}


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: f"{a['alert']}-{a['labels']['severity']}")
def test_every_alert_has_a_severity_words_and_a_runbook(alert: dict[str, Any]) -> None:
    assert alert["labels"]["severity"] in ("critical", "warning")
    assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    url = alert["annotations"]["runbook_url"]
    assert url.endswith(f"/docs/runbooks/{alert['alert']}.md")
    runbook = (RUNBOOKS / f"{alert['alert']}.md").read_text()
    assert runbook.startswith(f"# {alert['alert']}\n")
    for part in ("## What it means", "## How to confirm", "## What to do"):
        assert part in runbook, f"{alert['alert']}: {part}"


def test_every_runbook_belongs_to_an_alert_and_is_listed() -> None:
    names = {a["alert"] for a in alerts()}
    pages = {p.stem for p in RUNBOOKS.glob("*.md") if p.name != "README.md"}
    assert pages == names
    index = (RUNBOOKS / "README.md").read_text()
    assert all(f"[{name}]({name}.md)" in index for name in names)


def _metric_names(text: str) -> set[str]:
    names = set(re.findall(r"\b(userland_[a-z_]+)\b", text))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count")) else n
            for n in names}


def documented() -> set[str]:
    return set(re.findall(r"^\| `(userland_[a-z_]+)` \|", METRICS_DOC, re.MULTILINE))


def test_every_metric_the_rules_and_dashboards_read_is_documented() -> None:
    read = _metric_names("\n".join(p.read_text() for p in [*RULE_FILES, *DASHBOARDS]))
    assert read and read <= documented(), read - documented()


def test_every_recording_rule_is_in_the_slo_document() -> None:
    for rule in rules():
        if "record" in rule:
            name = rule["record"]
            assert name.startswith("userland:slo_")
            base, window = name.rsplit("_rate", 1)
            # Its SLO's row of the table names the base and every window.
            (row,) = [line for line in SLO_DOC.splitlines()
                      if line.startswith("|") and f"`{base}_rate" in line]
            assert f"_rate{window}`" in row, name


def test_generated_files_agree_with_their_sources() -> None:
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "observability.py"), "--check"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    rule = yaml.safe_load((OBSERVABILITY / "prometheusrule.yaml").read_text())
    groups = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == groups


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboards_are_grafana_json_with_a_question_per_panel(path: Path) -> None:
    board = json.loads(path.read_text())
    assert board["uid"].startswith("userland-") and board["title"].startswith("Userland: ")
    assert board["templating"]["list"][0]["type"] == "datasource"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels and all(p["description"].endswith("?") for p in panels)
    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    uses_course = "$course" in path.read_text()
    assert uses_course == any(v["name"] == "course" for v in board["templating"]["list"])


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    result = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_component_in_an_overlay(tmp_path: Path) -> None:
    """What a site's overlay gets: PodMonitors that select each component's pods on a port they
    serve metrics on (the same the scrape annotations name), the rules, and the dashboards as
    ConfigMaps labelled for Grafana's sidecar."""
    (tmp_path / "base").symlink_to(REPO / "deploy")
    (tmp_path / "observability").symlink_to(OBSERVABILITY)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["base"], "components": ["observability"]}))
    docs = _kustomize(tmp_path)
    # The overlay sets no namespace: the component's objects name the base's themselves.
    cluster_wide = ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                    "PriorityClass")
    assert all(d["metadata"]["namespace"] == "userland-system" for d in docs if d["kind"] not in cluster_wide)
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodMonitor"}
    assert set(monitors) == {"userland-operator", "userland-gateway", "userland-web", "userland-store"}
    for name, monitor in monitors.items():
        assert monitor["metadata"]["namespace"] == "userland-system"
        (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
        pod = deployment["spec"]["template"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (container,) = pod["spec"]["containers"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == endpoint["port"])
        annotations = pod["metadata"]["annotations"]
        assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/port"]) == ("true", str(port))
        assert endpoint["path"] == annotations["prometheus.io/path"] == "/metrics"
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    in_rule = {r.get("alert") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert in_rule >= {a["alert"] for a in alerts()}
    boards = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get(
        "grafana_dashboard") == "1"]
    assert len(boards) == len(DASHBOARDS) == 4
    for board in boards:
        (text,) = board["data"].values()
        assert json.loads(text)["uid"].startswith("userland-")
        assert board["metadata"]["annotations"]["grafana_folder"] == "Userland"
