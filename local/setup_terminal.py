"""What `userland local` tells the terminal: the banner of what runs where, and a line for each
child that stopped or came back. Its structured logs go to a file (`.run/logs/`)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from userland.local import assignment_example, examples
from userland.local.rules import template_apply
from userland.local.supervisor import Report

if TYPE_CHECKING:
    from userland.local.setup import LocalSetup


def say(text: str = "") -> None:
    # The terminal may be gone (closed: SIGHUP): stopping must go on all the same.
    with contextlib.suppress(OSError):
        print(text, flush=True)


def last_lines(path: Path, count: int = 6, *, limit: int = 64 * 1024) -> list[str]:
    """The last `count` non-blank lines of a child's log (read from its last `limit` bytes), for a
    child that keeps stopping: what it said as it died, on the terminal (and in CI's output), not
    only in a file that is gone with the machine."""
    try:
        with path.open("rb") as log_file:
            start = max(0, log_file.seek(0, 2) - limit)
            log_file.seek(max(0, start - 1))
            data = log_file.read()
    except OSError:
        return []
    cut = start > 0 and data[:1] != b"\n"  # begun in the middle of a line
    lines = data[1 if start > 0 else 0:].decode("utf-8", "replace").splitlines()
    if cut:
        lines = lines[1:]  # left out, never shown in half
    return [line[:400] for line in lines if line.strip()][-count:]


def gave_up_words(name: str, status: int | None, log_path: Path) -> str:
    """Why `userland local` stops while starting: a child that keeps stopping, and its last words."""
    tail = "".join(f"\n    | {line}" for line in last_lines(log_path))
    said = f"; it said last:{tail}" if tail else ""
    return f"the {name} keeps stopping (exit status {status}); see {log_path}{said}"


def restart_words(report: Report) -> str:
    """One terminal line about a child that stopped or came back."""
    name = "Redis" if report.name == "redis" else f"the {report.name}"
    if report.what == "exited":
        lost = " (signed-in sessions were in it: sign in again)" if report.name == "redis" else ""
        return (f"  {name} stopped (exit status {report.status}); starting it again in "
                f"{report.retry_in:g} s{lost}; see {report.log_path}")
    return f"  {name} is running again (restarts: {report.restarts})"


def banner(setup: LocalSetup, all_ready: bool) -> None:
    """What is running and where to open it, once everything has started."""
    o = setup.options
    kubeconfig = o.kubeconfig
    students = ", ".join(o.students) or "(none yet)"
    login = ("GitHub (USERLAND_GITHUB_CLIENT_ID is set; the OAuth app's callback must be "
             f"{o.public_url}/auth/callback)") if o.github else \
        f"development login: type any name, e.g. {o.students[0] if o.students else 'alice'}"
    say()
    say("Userland is running on this machine.")
    say()
    first = o.students[0] if o.students else "alice"
    say(f"  Open        {o.origin(examples.DEMO_HOST)}/   (sends each student to their own address,")
    say(f"              such as {o.origin(examples.DEMO_HOST, first)}/; overview: {o.public_url}/)")
    say(f"              sign in with the {login}")
    say(f"              students with an environment: {students}")
    say(f"  Web UI      {o.public_url}/   sign in as {examples.INSTRUCTOR} (instructor of the course "
        f"{examples.NAMESPACE}), {examples.ASSISTANT} (its assistant) or {examples.ADMIN} (admin); "
        "students see their environments and ask for help there")
    if setup.lms is not None:
        say(f"  LMS         {setup.lms.url}/   an example LMS course (LTI 1.3): open Userland from it as "
            f"the student {first} (their environment) or as its instructor prof (the class dashboard)")
    label = "Apps"
    for template in setup.templates:
        name = template["metadata"]["name"]
        if name == examples.DEMO_TEMPLATE:
            continue
        title = str(template["spec"].get("displayName") or name)
        program = next((c.get("command") or [""])[0] for c in template["spec"]["podSpec"]["containers"])
        installed = shutil.which(program, path=":".join(str(b) for b in setup.app_bins)) is not None
        note = "" if installed else "   (not installed here: run `make local-apps`)"
        say(f"  {label:<11} {o.origin(examples.local_host(name))}/  {title}{note}")
        label = ""
    if len(setup.templates) > 1:
        students = ", ".join(o.students[:examples.APP_STUDENTS]) or "nobody yet"
        say(f"              (each: sign in as {students}, or add students in the Web UI)")
    say(f"  kubectl     export KUBECONFIG={kubeconfig}; "
        f"kubectl get userlands,deployments,services -n {examples.NAMESPACE}")
    say(f"  Add one     {examples.add_student_command()}")
    if setup.assignments.git is not None:
        first = o.students[0] if o.students else "alice"
        for line in assignment_example.banner(o.public_url, o.origin, first):
            say(line)
        say(assignment_example.git_banner(setup.assignments.git.url))
    say(f"  Metrics     operator http://127.0.0.1:{setup.operator_port}/metrics   (/healthz beside it)")
    say(f"              gateway  http://127.0.0.1:{setup.gateway_internal_port}/metrics   (its internal "
        f"port; {o.port} serves no /healthz or /metrics)")
    say(f"              web UI   http://127.0.0.1:{setup.web_internal_port}/metrics   (its internal port)")
    say(f"              runner   http://127.0.0.1:{setup.runner_metrics_port}/metrics   (the local "
        "kubelet's part); what each answers: docs/metrics.md")
    if setup.prometheus_port:
        # /classic/alerts: Debian's Prometheus 2.42 ships only the classic pages (/alerts is a 404).
        say(f"  Prometheus  http://127.0.0.1:{setup.prometheus_port}/   scrapes all of the above and the "
            "control plane, with the alert rules")
        say(f"              alerts   http://127.0.0.1:{setup.prometheus_port}/classic/alerts")
    else:
        say("  Prometheus  `make run PROMETHEUS=1` starts one that scrapes all of it, with the alerts")
    if o.idle:
        say(f"  Sleep       every example Template's environments sleep after {o.idle} unused "
            "(make run IDLE=...)")
    if setup.kept_templates:
        say(f"  Templates   {template_apply.kept_words(setup.kept_templates, examples.NAMESPACE)}")
    say(f"  Logs        {o.log_dir}/")
    say(f"  State       {o.state_dir}/ (kept between runs; --reset starts afresh)")
    pids = ", ".join(f"{c.name} {c.pid}" for c in setup.children.values())
    if setup.plane is not None:
        pids = ", ".join(f"{n} {p.pid}" for n, p in setup.plane.processes.items()) + ", " + pids
    say(f"  Processes   {pids}")
    if not all_ready:
        say(f"  Note        not every student's environment is Ready yet; see {o.log_dir}/")
    say()
    say("Ready. Press Ctrl-C to stop everything.")
