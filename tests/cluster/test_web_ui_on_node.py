"""The web UI in its Pod, with the real ServiceAccount token Kubernetes mounted there: an
instructor signs in through the gateway and adds a student, who then gets a running Pod."""

from __future__ import annotations

import json
from typing import Any

from tests.cluster.conftest import (
    COURSE,
    CSRF,
    INSTRUCTOR,
    PUBLIC_URL,
    SYSTEM,
    Platform,
    browser,
    envapp_template,
    kubectl,
    kubectl_json,
    origin,
    sign_in,
    student_pods,
    userland,
    wait_until,
)


def test_the_web_ui_runs_with_its_own_service_account_token(platform: Platform) -> None:
    listed = kubectl_json("-n", SYSTEM, "get", "pods", "-l", "app.kubernetes.io/name=userland-web")["items"]
    pods = [p for p in listed if not p["metadata"].get("deletionTimestamp")]
    assert pods
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == "userland-web"
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert any(m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts)
    # What that identity may do is the project's RBAC, checked by the API server itself.
    who = "system:serviceaccount:userland-system:userland-web"
    assert kubectl("auth", "can-i", "create", "userlands.userland.dev", "-n", COURSE, f"--as={who}",
                   check=False).strip() == "yes"
    assert kubectl("auth", "can-i", "create", "deployments", "-n", COURSE, f"--as={who}",
                   check=False).strip() == "no"


async def test_an_instructor_adds_a_student_in_the_web_ui(platform: Platform) -> None:
    async with browser(platform.gateway_ip) as client:
        form = await sign_in(client, platform.github, INSTRUCTOR,
                             f"{PUBLIC_URL}/auth/login?next=/courses/{COURSE}/add")
        assert form.status == 200, await form.text()
        page = await form.text()
        match = CSRF.search(page)
        assert match, page[:2000]
        added = await client.post(f"{PUBLIC_URL}/courses/{COURSE}/add",
                                  data={"csrf": match.group(1), "login": "erin", "template": "testenv"},
                                  headers={"Origin": PUBLIC_URL})
        text = await added.text()
        assert added.status == 200, text[:2000]
        assert "erin" in text
    # The web UI created the Userland with its own token; the operator and the node did the rest.
    created = json.loads(kubectl("-n", COURSE, "get", "userland", "testenv-erin", "-o", "json"))
    assert (created["spec"]["user"], created["spec"]["template"]) == ("erin", "testenv")

    def running() -> list[dict[str, Any]]:
        return [p for p in student_pods("erin") if all(
            s["ready"] for s in p["status"].get("containerStatuses") or [{"ready": False}])]

    wait_until(running, "erin's Pod ready", timeout=180)
    # The class dashboard shows her, from the web UI's own watches.
    async with browser(platform.gateway_ip) as client:
        dashboard = await sign_in(client, platform.github, INSTRUCTOR,
                                  f"{PUBLIC_URL}/auth/login?next=/courses/{COURSE}")
        assert dashboard.status == 200
        assert "erin" in await dashboard.text()
    # And Erin reaches it.
    async with browser(platform.gateway_ip) as erin:
        response = await sign_in(erin, platform.github, "erin", origin("erin") + "/whoami")
        assert (await response.json())["owner"] == "erin"


async def test_the_dashboard_says_when_an_image_cannot_be_downloaded(platform: Platform) -> None:
    # A Template naming an image that is on no registry this node reaches: its Pods really fail
    # to pull, and the class dashboard must say so in plain words, from the real kubelet's
    # waiting reason.
    broken = envapp_template()
    broken["metadata"]["name"] = "broken"
    broken["spec"]["routing"] = {"host": "broken.test"}
    broken["spec"].pop("storage")
    broken["spec"]["podSpec"]["containers"][0]["image"] = "localhost/userland-not-built:1"
    kubectl("apply", "-f", "-", stdin=json.dumps(broken))
    kubectl("apply", "-f", "-", stdin=json.dumps(userland("grace", "broken")))

    def pull_failed() -> bool:
        for pod in student_pods("grace", "broken"):
            for status in pod["status"].get("containerStatuses") or []:
                waiting = (status.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
                    return True
        return False

    wait_until(pull_failed, "the broken Template's image pull fails", timeout=180)
    async with browser(platform.gateway_ip) as client:
        page = await sign_in(client, platform.github, INSTRUCTOR,
                             f"{PUBLIC_URL}/auth/login?next=/courses/{COURSE}?q=grace")
        text = await page.text()
        assert page.status == 200
        assert "grace" in text and "the image cannot be downloaded" in text, text[-3000:]
    kubectl("-n", COURSE, "delete", "userland", "broken-grace", "--wait=true")
    kubectl("-n", COURSE, "delete", "template", "broken")
