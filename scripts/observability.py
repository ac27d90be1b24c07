"""Writes deploy/observability/'s generated files from their one source each:

- dashboards/*.json, Grafana dashboards, from the panel lists below (one section a row, so each
  capability adds its own: issue 19's assignments and issue 20's help get a row each);
- prometheusrule.yaml, the Prometheus Operator's PrometheusRule, from rules/*.yaml (the plain rule
  files, which any Prometheus loads as they are).

  .venv/bin/python scripts/observability.py           # write them
  .venv/bin/python scripts/observability.py --check   # exit 1 if a written file differs

tests/observability/test_rules.py runs `--check`, so a rule or panel changed here without the
files (or the other way round) fails. Every panel's query answers a question docs/metrics.md
names; tests/observability/test_end_to_end.py runs each one against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parents[1] / "deploy" / "observability"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
COURSE = '{course="$course"}'


@dataclass(frozen=True)
class Panel:
    title: str
    question: str  # the panel's description: the operator's question it answers
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    kind: str = "timeseries"  # timeseries, stat, table
    unit: str = "short"
    width: int = 12


@dataclass(frozen=True)
class Section:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    sections: tuple[Section, ...]
    course_variable: bool = False
    tags: tuple[str, ...] = field(default=("userland",))


def q(expr: str, legend: str = "") -> tuple[str, str]:
    return (expr, legend)


RATE = "$__rate_interval"


def per_second(metric: str, selector: str = "", by: str = "", window: str = RATE) -> str:
    """`sum [by (...)] (rate(metric{selector}[window]))`."""
    return f"sum{f' by ({by})' if by else ''} (rate({metric}{selector}[{window}]))"


def quantile(p: float, metric: str, selector: str = "", by: str = "", window: str = RATE) -> str:
    """The p-quantile of a histogram's buckets, summed over everything but `le` (and `by`)."""
    bucket = per_second(f"{metric}_bucket", selector, f"le{', ' + by if by else ''}", window)
    return f"histogram_quantile({p}, {bucket})"


def quantiles(metric: str, selector: str = "", window: str = RATE, ps: tuple[float, ...] = (0.5, 0.9)
              ) -> tuple[tuple[str, str], ...]:
    return tuple(q(quantile(p, metric, selector, window=window), f"p{round(p * 100)}") for p in ps)


def env(phase: str) -> str:
    return f'sum(userland_environments{{course="$course",phase=~"{phase}"}})'


OVERVIEW = Dashboard(
    "userland-overview", "Userland: platform overview",
    "Is everything fine? Students' environments, the SLOs, what fires, each component at a glance.",
    (
        Section("Students and environments", (
            Panel("Environments ready", "How many environments answer right now?",
                  (q('sum(userland_environments{phase="Ready"})'),), "stat", width=6),
            Panel("Environments that cannot start", "How many environments are stuck, whatever the reason?",
                  (q("sum(userland_environments_failing) or vector(0)"),), "stat", width=6),
            Panel("Longest wait now", "Is any student waiting for an environment, and for how long?",
                  (q("max(userland_environment_wait_longest_seconds)"),), "stat", "s", width=6),
            Panel("Signed-in browsers",
                  "How many sessions are live (platform) and how many origins signed in?",
                  (q('max(userland_gateway_sessions{kind="platform"})', "platform"),
                   q('max(userland_gateway_sessions{kind="origin"})', "origins")), "stat", width=6),
            Panel("Environments by phase", "How many environments are in each phase, across courses?",
                  (q("sum by (phase) (userland_environments)", "{{phase}}"),)),
            Panel("Cannot start, by reason", "Why can environments not start (image, crash, quota, ...)?",
                  (q("sum by (reason) (userland_environments_failing)", "{{reason}}"),)),
        )),
        Section("Service levels (docs/slo.md)", (
            Panel("Error ratio of each SLI (1 h)", "Is any SLO burning its budget?",
                  (q("userland:slo_wake:error_ratio_rate1h", "wakes over 60 s or failed (budget 1%)"),
                   q("userland:slo_gateway:error_ratio_rate1h", "gateway failures (budget 0.5%)"),
                   q("userland:slo_start:error_ratio_rate1h", "starts over 5 min (budget 5%)"),
                   q("userland:slo_web:error_ratio_rate1h", "web UI failures (budget 0.5%)")),
                  unit="percentunit"),
            Panel("Firing and pending alerts", "What do the alert rules say right now?",
                  (q('sum by (alertname, alertstate, severity) (ALERTS{alertname=~"Userland.*"})',
                     "{{alertname}} {{alertstate}} ({{severity}})"),), "table"),
        )),
        Section("Components", (
            Panel("Gateway requests per second", "How busy is the gateway, and how much fails?",
                  (q(per_second("userland_gateway_requests_total", by="code_class"), "{{code_class}}"),
                   q(per_second("userland_gateway_failed_requests_total"), "failed (the gateway's own)")),
                  unit="reqps"),
            Panel("Operator reconciles per second", "Is the operator working, and does it fail?",
                  (q(per_second("userland_operator_reconciles_total", by="result"), "{{result}}"),
                   q("sum(userland_operator_leader)", "leaders"))),
            Panel("Web UI requests per second", "How busy is the web UI, and does it fail?",
                  (q(per_second("userland_web_requests_total", by="code_class"), "{{code_class}}"),),
                  unit="reqps"),
            Panel("API server and Redis trouble", "Do the API server or Redis fail Userland's requests?",
                  (q(per_second("userland_kube_requests_total", '{code=~"none|429|5.."}', "component")
                     + " or vector(0)", "API failures {{component}}"),
                   q(per_second("userland_redis_errors_total", by="component, kind"),
                     "Redis {{kind}} {{component}}"),
                   q("min(userland_gateway_redis_connected)", "Redis connected (gateway)"))),
        )),
    ))

COURSE_DASHBOARD = Dashboard(
    "userland-course", "Userland: a course at lecture time",
    "One course while its class arrives: who is waiting, how fast wakes go, what fails, what staff did.",
    (
        Section("Right now", (
            Panel("Ready",
                  "How many of the course's environments answer?", (q(env("Ready")),), "stat", width=4),
            Panel("Starting or waking", "How many are on their way?", (q(env("Starting|Pending")),), "stat",
                  width=4),
            Panel("Asleep", "How many sleep (and wake when opened)?", (q(env("Idle")),), "stat", width=4),
            Panel("Cannot start", "How many are stuck?",
                  (q(f"sum(userland_environments_failing{COURSE}) or vector(0)"),), "stat", width=4),
            Panel("Longest wait", "How long has the course's longest-waiting student waited?",
                  (q(f"max(userland_environment_wait_longest_seconds{COURSE})"),), "stat", "s", width=4),
            Panel("In the wake line", "How many wait for their turn to wake?",
                  (q(f"sum(userland_wake_line_length{COURSE})"),), "stat", width=4),
        )),
        Section("Arriving", (
            Panel("Environments by phase", "How does the class move from asleep to ready?",
                  (q(f"sum by (phase) (userland_environments{COURSE})", "{{phase}}"),)),
            Panel("Wakes and sleeps per minute",
                  "Who wakes environments: students, staff, start-all, a lecture?",
                  (q(per_second("userland_environment_wakes_total", COURSE, "cause") + " * 60", "{{cause}}"),
                   q(per_second("userland_environment_sleeps_total", COURSE) + " * 60", "sleeps"))),
            Panel("Wake time (request to Ready)", "How long does a student wait for a sleeping environment?",
                  quantiles("userland_environment_wake_seconds", COURSE, "5m"), unit="s"),
            Panel("Wake line", "How long is the line, and how long do environments wait in it?",
                  (q(f"sum(userland_wake_line_length{COURSE})", "in line"),
                   q(quantile(0.9, "userland_wake_line_wait_seconds", COURSE, window="5m"), "p90 wait (s)"))),
            Panel("Start time (created to Ready)", "How long does a new student wait for a new environment?",
                  quantiles("userland_environment_start_seconds", COURSE, "30m"), unit="s"),
            Panel("Waking pages shown per minute", "How many requests met an environment not answering yet?",
                  (q(per_second("userland_gateway_waiting_answers_total", COURSE) + " * 60",
                     "waiting answers"),
                   q(per_second("userland_gateway_wake_requests_total", COURSE) + " * 60", "wakes asked"))),
        )),
        Section("Trouble", (
            Panel("Cannot start, by Template and reason", "Which Template fails, and why?",
                  (q(f"sum by (template, reason) (userland_environments_failing{COURSE})",
                     "{{template}}: {{reason}}"),)),
            Panel("Failures and failed wakes (last hour)",
                  "How many environments failed (and wakes) recently?",
                  (q(f"sum by (reason) (increase(userland_environment_failures_total{COURSE}[1h]))",
                     "{{reason}}"),
                   q(f"sum(increase(userland_environment_wake_failures_total{COURSE}[1h]))",
                     "failed wakes"))),
            Panel("What staff did (last hour)",
                  "What did the course's staff start, restart, suspend or remove?",
                  (q(f"sum by (action, outcome) (increase(userland_web_actions_total{COURSE}[1h]))",
                     "{{action}}: {{outcome}}"),), "table"),
        )),
        Section("Assignments", (
            Panel("Copies missing", "How many students' copies whose deadline has come are not taken yet?",
                  (q(f"sum(userland_assignment_copies_missing{COURSE}) or vector(0)"),), "stat", width=6),
            Panel("Could not receive an assignment", "How many students' hand-outs failed?",
                  (q('sum(userland_assignment_students{course="$course",state="Failed"}) or vector(0)'),),
                  "stat", width=6),
            Panel("Assignments by phase", "Which assignments are being handed out, open, collected?",
                  (q(f"sum by (phase) (userland_assignments{COURSE}) or vector(0)", "{{phase}}"),), width=6),
            Panel("Students by hand-out state", "Have the students got their files, or kept their own?",
                  (q(f"sum by (state) (userland_assignment_students{COURSE}) or vector(0)", "{{state}}"),),
                  width=6),
        )),
        Section("Help in the lab", (
            Panel("Asking for help, and help given, per hour",
                  "How many students ask for help, and how often do staff join (asked, or opened unasked)?",
                  (q(per_second("userland_web_help_asks_total", COURSE) + " * 3600", "asked"),
                   q(per_second("userland_web_help_grants_total", COURSE, "basis") + " * 3600",
                     "joined: {{basis}}"))),
            Panel("Time until someone comes",
                  "How long do students wait from asking to a member of staff joining?",
                  quantiles("userland_web_help_wait_seconds", COURSE, "30m"), unit="s"),
            Panel("How access ended (last hour)",
                  "Did staff press Done, did students end it, did it run out, or was it revoked?",
                  (q(f"sum by (end) (increase(userland_web_help_ends_total{COURSE}[1h]))", "{{end}}"),),
                  "table"),
        )),
    ),
    course_variable=True)

GATEWAY_ONLY = '{component="gateway"}'
GATEWAY = Dashboard(
    "userland-gateway", "Userland: gateway",
    "Every request students make: how many, how fast, what fails, what is refused, Redis and sessions.",
    (
        Section("Traffic", (
            Panel("Requests per second, by status class", "How much traffic, and which answers?",
                  (q(per_second("userland_gateway_requests_total", by="code_class"), "{{code_class}}"),),
                  unit="reqps"),
            Panel("The gateway's own failures (SLI)", "Which share of requests did the platform fail?",
                  (q(per_second("userland_gateway_failed_requests_total") + " / "
                     + per_second("userland_gateway_requests_total"), "failed"),), unit="percentunit"),
            Panel("Latency to the response headers", "How long do students wait for an answer?",
                  quantiles("userland_gateway_request_duration_seconds", ps=(0.5, 0.95, 0.99)), unit="s"),
            Panel("Upstream errors, by kind", "Which environments does the gateway fail to reach, and how?",
                  (q(per_second("userland_gateway_upstream_errors_total", by="kind"),
                     "{{kind}}"),), unit="reqps"),
            Panel("Open WebSockets and connections", "How many editors and terminals are connected?",
                  (q("sum(userland_gateway_websockets_active)", "WebSockets"),
                   q("sum(userland_gateway_connections_open)", "connections"))),
            Panel("Refusals, by kind and reason", "What is refused: no session, another site, the limits?",
                  (q(per_second("userland_gateway_refusals_total", by="kind, reason"),
                     "{{kind}}: {{reason}}"),),
                  unit="reqps"),
        )),
        Section("Sessions and Redis", (
            Panel("Sessions", "How many browsers are signed in, and how many student origins?",
                  (q("max by (kind) (userland_gateway_sessions)", "{{kind}}"),)),
            Panel("Sign-ins and handoffs per minute, by outcome",
                  "Do sign-ins succeed? Do origins get signed in?",
                  (q(per_second("userland_gateway_sign_ins_total", by="outcome") + " * 60",
                     "sign-in {{outcome}}"),
                   q(per_second("userland_gateway_handoffs_total", by="outcome") + " * 60",
                     "handoff {{outcome}}"))),
            Panel("Redis round trips", "Is Redis slow?",
                  quantiles("userland_redis_command_duration_seconds", GATEWAY_ONLY, ps=(0.5, 0.99)),
                  unit="s"),
            Panel("Redis errors and connection", "Does Redis fail, and is the gateway connected?",
                  (q(per_second("userland_redis_errors_total", GATEWAY_ONLY, "kind"), "{{kind}}"),
                   q("min(userland_gateway_redis_connected)", "connected"))),
            Panel("Staff requests on students' origins (help in the lab)",
                  "Are staff let in by their grants; are ended grants and other sites' pages refused?",
                  (q(per_second("userland_gateway_help_requests_total", by="outcome"), "{{outcome}}"),
                   q(per_second("userland_gateway_help_connections_closed_total", by="reason") + " * 60",
                     "closed per minute: {{reason}}")), unit="reqps"),
            Panel("Wakes asked per minute, by course", "Which courses' students are waking environments?",
                  (q(per_second("userland_gateway_wake_requests_total", by="course") + " * 60",
                     "{{course}}"),)),
            Panel("API server, from the gateway", "Do the gateway's watches work?",
                  (q(f"min by (resource) (userland_watch_healthy{GATEWAY_ONLY})", "{{resource}} healthy"),
                   q(per_second("userland_watch_restarts_total", GATEWAY_ONLY, "reason"),
                     "restarts: {{reason}}"))),
        )),
    ))

OPERATOR_ONLY = '{component="operator"}'
OPERATOR = Dashboard(
    "userland-operator", "Userland: operator",
    "The controller: its lease, its work, its errors, and its conversation with the API server.",
    (
        Section("Work", (
            Panel("Leaders", "Does exactly one operator hold the lease?",
                  (q("sum(userland_operator_leader)"),), "stat", width=6),
            Panel("Queue depth", "Is the operator behind?",
                  (q("sum(userland_operator_queue_depth)"),), "stat", width=6),
            Panel("Since the last reconcile", "How long ago did the leader last finish a reconcile?",
                  (q("time() - max(userland_operator_last_reconcile_timestamp_seconds)"),), "stat", "s",
                  width=6),
            Panel("Cached objects", "How many objects does the operator watch?",
                  (q("max by (kind) (userland_operator_cached_objects)", "{{kind}}"),), "stat", width=6),
            Panel("Reconciles per second, by kind and result", "Does it work, and does it fail?",
                  (q(per_second("userland_operator_reconciles_total", by="kind, result"),
                     "{{kind}} {{result}}"),)),
            Panel("Reconcile errors, by reason", "What fails when a reconcile fails?",
                  (q(per_second("userland_operator_reconcile_errors_total", by="kind, reason")
                     + " or vector(0)", "{{kind}}: {{reason}}"),)),
            Panel("Reconcile duration", "How long does a reconcile take?",
                  (q(quantile(0.99, "userland_operator_reconcile_duration_seconds", by="kind"),
                     "p99 {{kind}}"),),
                  unit="s"),
            Panel("Sleeps, wakes and failures (last hour)", "What happened to environments?",
                  (q("sum(increase(userland_environment_sleeps_total[1h]))", "sleeps"),
                   q("sum(increase(userland_environment_wakes_total[1h]))", "wakes"),
                   q("sum by (reason) (increase(userland_environment_failures_total[1h]))",
                     "failed: {{reason}}"))),
        )),
        Section("Assignments", (
            Panel("Worker Pods made per hour, by kind",
                  "How much hand-out, collection and feedback work runs?",
                  (q(per_second("userland_operator_assignment_worker_pods_total", by="kind") + " * 3600"
                     + " or vector(0)", "{{kind}}"),)),
            Panel("Source fetches (last hour), by result",
                  "Can the store fetch the assignments' repositories?",
                  (q("sum by (result) (increase(userland_operator_assignment_fetches_total[1h]))"
                     " or vector(0)", "{{result}}"),)),
            Panel("Copies taken over a minute late (last hour)",
                  "Are students' copies taken at their deadline, or late (later edits may be in them)?",
                  (q("sum(increase(userland_operator_assignment_copy_delay_seconds_count[1h])) - sum("
                     "increase(userland_operator_assignment_copy_delay_seconds_bucket{le=\"60.0\"}[1h]))"
                     " or vector(0)", "late copies"),
                   q("sum(userland_assignment_copies_missing) or vector(0)", "missing now"))),
        )),
        Section("API server", (
            Panel("Requests per second, by verb and answer", "What does the operator ask of the API server?",
                  (q(per_second("userland_kube_requests_total", OPERATOR_ONLY, "verb, code"),
                     "{{verb}} {{code}}"),),
                  unit="reqps"),
            Panel("Request latency, by verb", "Is the API server slow for the operator?",
                  (q(quantile(0.99, "userland_kube_request_duration_seconds", OPERATOR_ONLY, "verb"),
                     "p99 {{verb}}"),), unit="s"),
            Panel("Watches", "Do the watches hold, restart normally, or relist?",
                  (q(per_second("userland_watch_restarts_total", OPERATOR_ONLY, "reason"),
                     "restarts: {{reason}}"),
                   q(per_second("userland_watch_relists_total", OPERATOR_ONLY), "relists"),
                   q(f"min(userland_watch_healthy{OPERATOR_ONLY})", "all healthy"))),
            Panel("The API server's own view (when Prometheus scrapes it)",
                  "Is the API server busy or failing for everyone, not only for Userland?",
                  (q(per_second("apiserver_request_total", by="code"), "{{code}}"),), unit="reqps"),
        )),
    ))

DASHBOARDS = {"overview": OVERVIEW, "course": COURSE_DASHBOARD, "gateway": GATEWAY, "operator": OPERATOR}


TABLE = {"instant": True, "format": "table"}  # a table panel's query: now, as rows


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    height = 5 if panel.kind == "stat" else 8
    return {
        "id": panel_id, "type": panel.kind, "title": panel.title, "description": panel.question,
        "datasource": DATASOURCE, "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": ({"legend": {"displayMode": "list", "placement": "bottom"}}
                    if panel.kind == "timeseries" else {}),
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr,
                     "legendFormat": legend, **(TABLE if panel.kind == "table" else {})}
                    for i, (expr, legend) in enumerate(panel.queries)],
    }


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for section in dashboard.sections:
        panels.append({"id": panel_id, "type": "row", "title": section.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        panel_id, y, x, row_height = panel_id + 1, y + 1, 0, 0
        for panel in section.panels:
            if x + panel.width > 24:
                x, y, row_height = 0, y + row_height, 0
            panels.append(_panel_json(panel, panel_id, x, y))
            row_height = max(row_height, panels[-1]["gridPos"]["h"])
            panel_id, x = panel_id + 1, x + panel.width
        y += row_height
    variables: list[dict[str, Any]] = [{"name": "datasource", "label": "Data source", "type": "datasource",
                                         "query": "prometheus", "current": {}, "hide": 0}]
    if dashboard.course_variable:
        courses = "label_values(userland_environments, course)"
        variables.append({"name": "course", "label": "Course", "type": "query", "datasource": DATASOURCE,
                          "query": {"query": courses, "refId": "course"}, "definition": courses, "refresh": 2,
                          "includeAll": False, "multi": False, "sort": 1, "current": {}, "hide": 0})
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": list(dashboard.tags), "timezone": "browser", "schemaVersion": 39, "version": 1,
        "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "links": [{"type": "dashboards", "tags": ["userland"], "asDropdown": True, "title": "Userland"}],
        "templating": {"list": variables}, "annotations": {"list": []}, "panels": panels,
    }


def prometheus_rule() -> dict[str, Any]:
    groups = []
    for path in sorted((HERE / "rules").glob("*.yaml")):
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "userland", "namespace": "userland-system",
                     "labels": {"app.kubernetes.io/part-of": "userland"}},
        "spec": {"groups": groups},
    }


GENERATED_NOTE = ("# Generated by scripts/observability.py from rules/*.yaml (the plain rule files, the\n"
                  "# one source): edit those and run it again; tests/observability/ checks they agree.\n")


def outputs() -> dict[Path, str]:
    files = {HERE / "dashboards" / f"{name}.json": json.dumps(dashboard_json(d), indent=2) + "\n"
             for name, d in DASHBOARDS.items()}
    rule = yaml.safe_dump(prometheus_rule(), sort_keys=False, width=120)
    files[HERE / "prometheusrule.yaml"] = GENERATED_NOTE + rule
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a written file differs")
    args = parser.parse_args()
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        names = ", ".join(str(p) for p in stale)
        print(f"out of date (run scripts/observability.py): {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
