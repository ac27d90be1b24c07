"""A real Prometheus scrapes a running platform while a scripted class uses it, and its figures
match what happened; every dashboard query parses and returns series.

Real, all of it: `userland local --prometheus` (what `make run PROMETHEUS=1` starts): the
control plane (API server, etcd), the operator, the gateway, the web UI, Redis and the local
runner, with Debian's Prometheus scraping them every second and evaluating the project's rules.
Students sign in through the gateway's development login with real HTTP clients. The shipped
apps are made "not installed" (an empty USERLAND_APPS_BIN), so the run is light and the same
on every machine; their environments fail like an image that cannot be pulled.

The class, in the course `classroom`: four students (s1-s4) of a Template `lab` (the demo
environment, a 30-second idleTimeout) sign in and open their environments; they leave, and all
four go to sleep; three come back (their visits wake them), and the teacher starts the fourth
from the web UI. A Template `broken` names a program nobody installed: its three students'
environments fail, as an image that cannot be pulled does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from tests.support import MUST_COMPLETE, eventually, free_port
from tests.support.make_run import HTML, broken_banner_urls, browser, sign_in, userland_local
from userland.platform.clients.kube import PODS, TEMPLATES, USERLANDS, KubeClient
from userland.platform.model import naming

# The test starts `userland local` itself (tests/support/make_run.py), not through a fixture.
pytestmark = pytest.mark.make_run

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "classroom"
IDLE = 30
STUDENTS = ("s1", "s2", "s3", "s4")
BROKEN = ("b1", "b2", "b3")


@dataclass
class Platform:
    port: int
    state_dir: Path
    prometheus: str  # its base URL
    banner: str


@pytest.fixture
async def platform(tmp_path: Path) -> AsyncIterator[Platform]:
    port = free_port()
    os.chmod(tmp_path, 0o755)
    state_dir = tmp_path / "state"
    no_apps = tmp_path / "no-apps"
    no_apps.mkdir()
    env = {**os.environ, "USERLAND_APPS_BIN": str(no_apps)}
    async with userland_local(port, state_dir, "--prometheus", "--prometheus-interval", "1", env=env,
                              ready_within=180) as banner:
        found = re.search(r"Prometheus  (http://127\.0\.0\.1:\d+)/", banner)
        assert found, banner
        yield Platform(port, state_dir, found.group(1), banner)


class Prometheus:
    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url = url
        self.http = http

    async def query(self, expr: str) -> list[dict[str, Any]]:
        async with self.http.get(f"{self.url}/api/v1/query", params={"query": expr}) as response:
            body = await response.json()
        assert response.status == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def value(self, expr: str) -> float | None:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    async def until(self, expr: str, wanted: float, timeout: float = 60) -> None:
        """Until `expr` (one series) equals `wanted` (scrapes lag what happened by a second)."""
        deadline = time.monotonic() + timeout
        while (last := await self.value(expr)) != wanted:
            assert time.monotonic() < deadline, f"{expr} = {last}, not {wanted}"
            await asyncio.sleep(0.5)

    async def series(self, match: str) -> list[dict[str, str]]:
        async with self.http.get(f"{self.url}/api/v1/series", params={"match[]": match}) as response:
            body = await response.json()
        assert response.status == 200, body
        found: list[dict[str, str]] = body["data"]
        return found


async def phases(kube: KubeClient) -> dict[str, str]:
    items = (await kube.list(USERLANDS, NAMESPACE))["items"]
    return {u["metadata"]["name"]: str((u.get("status") or {}).get("phase") or "") for u in items}


async def make_class(kube: KubeClient) -> None:
    demo = (await kube.get(TEMPLATES, NAMESPACE, "demo"))["spec"]
    lab = {**demo, "displayName": "Lab", "routing": {"host": "lab.localhost"}, "idleTimeout": f"{IDLE}s"}
    broken_pod = json.loads(json.dumps(demo["podSpec"]))
    broken_pod["containers"][0]["command"] = ["no-such-ide"]  # installed nowhere: it cannot be had
    broken = {**demo, "displayName": "Broken", "routing": {"host": "broken.localhost"}, "podSpec": broken_pod}
    for name, spec, logins in (("lab", lab, STUDENTS), ("broken", broken, BROKEN)):
        await kube.create(TEMPLATES, NAMESPACE, {"apiVersion": naming.API_VERSION, "kind": "Template",
                                                 "metadata": {"name": name}, "spec": spec})
        for login in logins:
            await kube.create(USERLANDS, NAMESPACE, {
                "apiVersion": naming.API_VERSION, "kind": "Userland",
                "metadata": {"name": f"{name}-{login}"}, "spec": {"user": login, "template": name}})


def origin(login: str, port: int) -> str:
    return f"http://{login}.lab.localhost:{port}"


async def open_environment(http: aiohttp.ClientSession, login: str, port: int) -> bool:
    """The student's environment itself answers (not the waking page)."""
    async with http.get(origin(login, port) + "/", headers=HTML) as page:
        body = await page.text()
        return page.status == 200 and "Waking up" not in body and "Starting" not in body


async def teacher_starts(http: aiohttp.ClientSession, port: int, name: str) -> None:
    """The teacher presses Start for one environment on the class dashboard (the web UI)."""
    dashboard = f"http://localhost:{port}/courses/{NAMESPACE}"
    # The web UI's pages link to the sign-in (a 401 page); the sign-in comes back to the page.
    sign_in_url = f"http://localhost:{port}/auth/login?" + urlencode({"next": dashboard})
    page = await sign_in(http, port, "teacher", sign_in_url)
    text = await page.text()
    assert page.status == 200 and str(page.url) == dashboard, text
    csrf = re.search(r'name="csrf" value="([^"]+)"', text)
    assert csrf
    form = {"action": "start", "names": name, "csrf": csrf.group(1)}
    async with http.post(f"{dashboard}/actions", data=form,
                         headers={**HTML, "Origin": f"http://localhost:{port}"}) as done:
        assert done.status == 200 and "started" in await done.text()


@pytest.mark.slow
async def test_prometheus_sees_a_class_sign_in_sleep_wake_and_fail_an_image(platform: Platform) -> None:
    port = platform.port
    # The banner says where every part's metrics are.
    for part in ("operator", "gateway", "web UI", "runner"):
        assert re.search(rf"{part} +http://127\.0\.0\.1:\d+/metrics", platform.banner), part
    # ... and every address it prints answers: Prometheus's alerts page is where it says
    # (/alerts was a 404 on Debian's Prometheus 2.42).
    assert f"{platform.prometheus}/classic/alerts" in platform.banner
    assert await broken_banner_urls(platform.banner) == [], platform.banner
    async with await KubeClient.connect(str(platform.state_dir / "kubeconfig")) as kube, \
            aiohttp.ClientSession() as http:
        prom = Prometheus(platform.prometheus, http)
        # Every part of the platform is scraped, the control plane included.
        targets = await eventually(lambda: _targets_up(prom), timeout=60, interval=0.5)
        assert targets == {"kube-apiserver", "etcd", "userland-operator", "userland-gateway", "userland-web",
                           "userland-runner", "userland-store"}
        await make_class(kube)
        class_names, broken_names = [f"lab-{s}" for s in STUDENTS], [f"broken-{s}" for s in BROKEN]
        await eventually(lambda: _all(kube, class_names, "Ready"), timeout=90, interval=0.5)
        await eventually(lambda: _all(kube, broken_names, "Failed"), timeout=90, interval=0.5)

        sessions = {login: browser() for login in STUDENTS}
        teacher = browser()
        try:
            for login, student in sessions.items():  # each signs in and opens their environment
                page = await sign_in(student, port, login, origin(login, port) + "/")
                assert page.status == 200 and page.url.host == f"{login}.lab.localhost", await page.text()
            # Nobody uses them now: after the idle timeout, all four sleep.
            await eventually(lambda: _all(kube, class_names, "Idle"), timeout=IDLE + 60, interval=0.5)
            lab = '{course="classroom",template="lab"}'
            await prom.until(f"sum(userland_environment_sleeps_total{lab})", 4)
            await prom.until('sum(userland_environments{course="classroom",template="lab",phase="Idle"})', 4)

            # Three students come back (their visits wake them); the teacher starts the fourth.
            for login in STUDENTS[:3]:
                async with sessions[login].get(origin(login, port) + "/", headers=HTML) as page:
                    assert page.status == 200 and "Waking up" in await page.text()
            await teacher_starts(teacher, port, "lab-s4")
            for login in STUDENTS:
                await eventually(lambda login=login: open_environment(sessions[login], login, port),
                                 timeout=60, interval=0.5)
        finally:
            for client in (*sessions.values(), teacher):
                await client.close()

        # The figures match what happened.
        wakes = 'userland_environment_wakes_total{course="classroom",template="lab"'
        await prom.until(f'sum({wakes},cause="visit"}})', 3)
        await prom.until(f'sum({wakes},cause="staff-start"}})', 1)
        # The wake histogram counts the wakes made, each within the SLO's minute.
        await prom.until(f"sum(userland_environment_wake_seconds_count{lab})", 4)
        within = 'userland_environment_wake_seconds_bucket{course="classroom",template="lab",le="60.0"}'
        assert await prom.value(f"sum({within})") == 4
        assert await prom.value(f"sum(userland_environment_start_seconds_count{lab})") == 4
        assert await prom.value('sum(userland_wake_line_wait_seconds_count{course="classroom"})') == 4
        assert await prom.value(f"sum(userland_environment_wake_failures_total{lab})") == 0
        broken = '{course="classroom",template="broken"}'
        assert await prom.value(f'sum(userland_environments_failing{broken})') == 3
        assert await prom.value('userland_environments_failing{course="classroom",template="broken",'
                                'reason="image"}') == 3
        assert await prom.value(f'sum(userland_environment_failures_total{broken})') == 3
        # The gateway: four students and the teacher signed in; three wakes asked by visits.
        # (waited for: the gateway's last scrape may be older than the teacher's sign-in)
        await prom.until('sum(userland_gateway_sign_ins_total{outcome="succeeded"})', 5)
        await prom.until('sum(userland_gateway_handoffs_total{outcome="ok"})', 4)
        assert await prom.value('sum(userland_gateway_wake_requests_total{course="classroom"})') == 3
        assert (await prom.value('sum(userland_gateway_waiting_answers_total{course="classroom"})') or 0) >= 3
        assert await prom.value("sum(userland_gateway_failed_requests_total)") == 0
        assert await prom.value("min(userland_gateway_redis_connected)") == 1
        # Sessions are counted in Redis once a minute: five browsers, four students' origins.
        await prom.until('max(userland_gateway_sessions{kind="platform"})', 5, timeout=90)
        assert await prom.value('max(userland_gateway_sessions{kind="origin"})') == 4
        # The web UI: the teacher's Start, per environment.
        assert await prom.value('sum(userland_web_actions_total{course="classroom",action="start",'
                                'outcome="started"})') == 1
        assert (await prom.value('sum(userland_web_requests_total{route="/courses/{ns}",code_class="2xx"})')
                or 0) >= 1
        # The runner: the lab and the demo environments run; broken's and the apps' cannot.
        expected = await phases(kube)
        unrunnable = sorted(name for name, phase in expected.items() if phase == "Failed")
        assert len(unrunnable) == len(BROKEN) + 6  # and alice's and bob's three apps each
        # The gauge counts the runner's Pods, as its last scrape saw them; a Deployment may hold
        # two Pods of one Userland for a while (a new one beside the one it replaces). Read the
        # gauge and the Pods together until they agree: the unrunnable Pods are the gauge's
        # count, and they are exactly the failed Userlands'.
        async def gauge_counts_the_unrunnable_pods() -> bool:
            pods = (await kube.list(PODS, NAMESPACE))["items"]
            cannot = [p for p in pods if not p["metadata"].get("deletionTimestamp") and any(
                ((c.get("state") or {}).get("waiting") or {}).get("reason") == "ProgramNotInstalled"
                for c in (p.get("status") or {}).get("containerStatuses") or [])]
            owners = sorted({p["metadata"]["labels"][naming.LABEL_USERLAND] for p in cannot})
            gauge = await prom.value('userland_runner_pods{state="unrunnable"}')
            assert gauge == len(cannot) and owners == unrunnable, (
                gauge, [p["metadata"]["name"] for p in cannot], owners, unrunnable)
            return True
        await eventually(gauge_counts_the_unrunnable_pods, timeout=MUST_COMPLETE, interval=0.5)
        # The operator's API requests, by verb, and the control plane's own figures.
        assert (await prom.value('sum(userland_kube_requests_total{component="operator",verb="patch",'
                                 'resource="Userland/status"})') or 0) > 0
        assert (await prom.value("sum(apiserver_request_total)") or 0) > 0

        # The expected alerts go pending (their `for` runs longer than this test).
        alerts = await eventually(lambda: _alerts(prom, {("UserlandTemplateImageUnavailable", "broken"),
                                                         ("UserlandCourseEnvironmentsFailing", "")}),
                                  timeout=60, interval=0.5)
        assert alerts[("UserlandTemplateImageUnavailable", "broken")] in ("pending", "firing")
        assert "UserlandOperatorNotReconciling" not in {name for name, _ in alerts}

        await check_every_dashboard_query(prom)
        await check_every_metric_is_documented(prom)
        await check_promtool_lints_every_page(http, platform.banner)


async def _targets_up(prom: Prometheus) -> set[str] | None:
    async with prom.http.get(f"{prom.url}/api/v1/targets") as response:
        targets = (await response.json())["data"]["activeTargets"]
    up = {t["labels"]["job"] for t in targets if t["health"] == "up"}
    return up if len(up) == len(targets) == 7 else None


async def _all(kube: KubeClient, names: list[str], phase: str) -> bool:
    found = await phases(kube)
    return all(found.get(name) == phase for name in names)


async def _alerts(prom: Prometheus, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], str] | None:
    async with prom.http.get(f"{prom.url}/api/v1/alerts") as response:
        alerts = (await response.json())["data"]["alerts"]
    found = {(a["labels"]["alertname"], a["labels"].get("template", "")): a["state"] for a in alerts}
    return found if wanted <= set(found) else None


# The longest `interval` of the rule groups (deploy/observability/rules/slos.yaml).
RULE_GROUP_INTERVAL = max(int(seconds) for seconds in re.findall(
    r"^    interval: (\d+)s$", (REPO / "deploy" / "observability" / "rules" / "slos.yaml").read_text(),
    re.MULTILINE))

# What Grafana puts in a query's place for its variables and intervals.
VARIABLES = {"$course": NAMESPACE, "$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}


async def check_every_dashboard_query(prom: Prometheus) -> None:
    """Every panel's query (and every variable's) parses, and returns series, against the
    Prometheus that watched the class."""
    empty = []
    checked = 0
    for path in sorted((REPO / "deploy" / "observability" / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                found = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
                assert found, variable
                metric, label = found.groups()
                assert any(s.get(label) == NAMESPACE for s in await prom.series(metric)), variable
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for name, value in VARIABLES.items():
                    expr = expr.replace(name, value)
                assert "$" not in expr, expr
                checked += 1
                if not await prom.query(expr):  # a query that does not parse fails inside query()
                    empty.append((f"{board['uid']}: {panel['title']}", expr))
    # A recording rule's series appears at its group's next evaluation (the SLIs' group runs
    # every 30 s), which can come after the events it records: an empty answer is asked again
    # until two evaluations have passed.
    deadline = time.monotonic() + 2 * RULE_GROUP_INTERVAL + 5
    while empty and time.monotonic() < deadline:
        await asyncio.sleep(1)
        empty = [(where, expr) for where, expr in empty if not await prom.query(expr)]
    assert checked >= 60 and not empty, "\n".join(f"{where}: {expr}" for where, expr in empty)


async def check_every_metric_is_documented(prom: Prometheus) -> None:
    """What the running platform exports is exactly what docs/metrics.md lists (recording rules
    and the control plane's own metrics aside)."""
    async with prom.http.get(f"{prom.url}/api/v1/label/__name__/values") as response:
        names = (await response.json())["data"]
    exported = {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in names if n.startswith("userland_")}
    documented = {re.sub(r"_total$", "", n) for n in re.findall(
        r"^\| `(userland_[a-z_]+)` \|", (REPO / "docs" / "metrics.md").read_text(), re.MULTILINE)}
    # Only series this class cannot have can be missing: an error's (its reconciles did not fail),
    # a lecture's (its Templates have no schedule: tests/operator/test_capacity.py has them) and a
    # grader's results (its assignments name no grader: tests/operator/test_grading.py has them).
    assert exported <= documented, sorted(exported - documented)
    absent = {"userland_operator_reconcile_errors", "userland_lecture_ready",
              "userland_lecture_next_start_timestamp_seconds", "userland_lecture_environments_without_room",
              "userland_grading_duration_seconds", "userland_grading_results"}
    assert documented - exported <= absent, sorted(documented - exported)


async def check_promtool_lints_every_page(http: aiohttp.ClientSession, banner: str) -> None:
    """`promtool check metrics` (Prometheus' naming rules) finds nothing in any component's page."""
    pages = re.findall(r"(http://127\.0\.0\.1:\d+/metrics)", banner)
    assert len(pages) == 4, banner
    for url in pages:
        async with http.get(url) as response:
            text = await response.text()
        result = await asyncio.to_thread(subprocess.run, ["promtool", "check", "metrics"], input=text,
                                         capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
            url, result.stdout, result.stderr)
