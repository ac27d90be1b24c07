"""The `userland` command: one entry point, a subcommand per service.

What stops a service from starting (a missing setting, a kubeconfig that cannot be read, an
address it cannot serve on) is said in one line on stderr, and the exit status is 2: never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence

from userland.operator.rules.status import DEFAULT_START_TIMEOUT
from userland.platform.clients.kubeconfig import KubeConfigError, cluster_access
from userland.platform.clients.logs import setup_logging
from userland.platform.model.settings import Settings, SettingsError

log = logging.getLogger("userland.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="userland", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    op = sub.add_parser("operator", help="run the controller (Template + Userland -> workloads)")
    op.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, then ~/.kube/config)"
    )
    op.add_argument("--listen", default="0.0.0.0:8081", help="address for /healthz and /metrics")
    op.add_argument("--workers", type=int, default=16, help="reconcile workers")
    op.add_argument("--identity", default=None, help="leader-election identity (default: hostname-pid)")
    op.add_argument(
        "--no-leader-election",
        action="store_true",
        help="act without a Lease (only when exactly one operator runs)",
    )
    op.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a leader's Lease lasts without renewal (takeover time)",
    )
    op.add_argument(
        "--resync",
        type=float,
        default=600.0,
        help="seconds between full re-checks of every object (drift safety net)",
    )
    op.add_argument(
        "--start-timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT,
        help="seconds an environment's Pod may take to become ready before its status says "
             "Failed (StartTimeout); 0: no bound",
    )

    gw = sub.add_parser("gateway", help="run the gateway (login, routing to each student's environment)")
    gw.add_argument("--listen", default="0.0.0.0:8080",
                    help="public address to serve on; /healthz, /metrics and /auth/verify answer only "
                         "on USERLAND_INTERNAL_LISTEN (default 0.0.0.0:8081)")
    gw.add_argument("--kubeconfig", default=None,
                    help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    gw.add_argument("--workers", type=int, default=1,
                    help="processes sharing the port (SO_REUSEPORT); about one per core")
    gw.add_argument("--grace", type=float, default=30.0,
                    help="seconds open WebSockets keep working after SIGTERM before closing with 1001")
    gw.add_argument("--no-metrics", action="store_true",
                    help="count nothing per request and serve an empty /metrics (for a site without "
                         "Prometheus; what the metrics cost is measured against it)")

    wb = sub.add_parser("web", help="run the web UI (instructors' courses, students' environments)")
    wb.add_argument("--listen", default="0.0.0.0:8080", help="address to serve on (behind the gateway)")
    wb.add_argument("--kubeconfig", default=None,
                    help="kubeconfig file (default: in-cluster, then ~/.kube/config)")

    st = sub.add_parser("store", help="run the assignment store (sources, students' copies, feedback)")
    st.add_argument("--listen", default="0.0.0.0:8080", help="address to serve on")
    st.add_argument("--internal-listen", default="",
                    help="address for /healthz and /metrics only, apart from the API (none by default)")
    st.add_argument("--data", default="/var/lib/userland-store",
                    help="folder holding everything (a ReadWriteOnce volume in a cluster)")

    aw = sub.add_parser("assignment-work", help="what an assignment's worker Pod runs (the operator makes "
                                                "them; USERLAND_JOB, USERLAND_JOB_TOKEN, USERLAND_STORE_URL)")
    aw.add_argument("step", nargs="?", default="", choices=("", "fetch", "report", "snapshot"),
                    help="a grading Pod's step (docs/grading.md)")
    for flag, words in (("--volume", "the student's volume"), ("--path", "the assignment's folder in it"),
                        ("--out", "the tar to write"), ("--max-bytes", "the folder's largest size")):
        aw.add_argument(flag, default="", help=f"snapshot (Check my work): {words}")

    lo = sub.add_parser("local", help="the whole platform on this machine (make run); Ctrl-C stops it all")
    lo.add_argument("--port", type=int, default=8000, help="gateway port on 127.0.0.1 (default 8000)")
    lo.add_argument("--state-dir", default=None, help="state and logs (default: .run/ in the checkout)")
    lo.add_argument("--students", default="alice,bob,carol",
                    help="logins that get a demo environment (comma-separated)")
    lo.add_argument("--reset", action="store_true", help="delete the state from earlier runs first")
    lo.add_argument("--prometheus", action="store_true",
                    help="also start a Prometheus (Debian's) that scrapes every part, with the alert rules")
    lo.add_argument("--prometheus-interval", type=float, default=5.0,
                    help="seconds between its scrapes and rule evaluations (default 5)")
    lo.add_argument("--idle", default=None, metavar="DURATION",
                    help="every example Template's idleTimeout, to try sleep and wake (such as 1m)")
    return parser


def _local(args: argparse.Namespace) -> int:
    from pathlib import Path

    from userland.local.setup import run_local
    from userland.local.setup_options import LocalOptions, default_state_dir
    from userland.platform.model import naming

    try:
        students = tuple(naming.normalize_login(s.strip()) for s in args.students.split(",") if s.strip())
    except naming.InvalidName as err:
        print(f"userland local: --students: {err}", file=sys.stderr)
        return 2
    idle = None
    if args.idle:
        from userland.local.rules.template_apply import parse_idle
        try:
            idle = parse_idle(args.idle)
        except ValueError as err:
            print(f"userland local: {err}", file=sys.stderr)
            return 2
    state_dir = Path(args.state_dir).resolve() if args.state_dir else default_state_dir()
    return run_local(LocalOptions(state_dir=state_dir, port=args.port, students=students, reset=args.reset,
                                  prometheus=args.prometheus, prometheus_interval=args.prometheus_interval,
                                  idle=idle))


def parse_address(listen: str) -> tuple[str, int]:
    """`host:port` (`[::1]:8081`, `:8081` for every address); ValueError saying how otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {listen!r}: use host:port with a port from 0 to 65535, "
                         "such as 0.0.0.0:8081")
    return host.strip("[]") or "0.0.0.0", int(port)


def kubeconfig_problem(kubeconfig: str | None) -> str | None:
    """Why the API server's address and credentials cannot be had (None: they can)."""
    try:
        asyncio.run(cluster_access(kubeconfig))
    except KubeConfigError as err:
        hint = "" if kubeconfig else " (name one with --kubeconfig, or run inside the cluster)"
        return f"{err}{hint}"
    return None


def _serving(args: argparse.Namespace, serve: Callable[[], int]) -> int:
    """Run a server; an address it cannot listen on (in use, not this machine's) is one line."""
    try:
        return serve()
    except OSError as err:
        log.debug("could not serve", exc_info=True)
        where = err.filename or args.listen  # another listener than --listen names itself
        print(f"userland {args.command}: cannot serve on {where}: {err.strerror or err}",
              file=sys.stderr)
        return 2


def _kubeconfig_ok(args: argparse.Namespace) -> bool:
    if (problem := kubeconfig_problem(args.kubeconfig)) is None:
        return True
    print(f"userland {args.command}: {problem}", file=sys.stderr)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    if args.command == "local":
        return _local(args)
    if args.command == "assignment-work":
        from userland.coursework.worker import main as work

        if args.step == "snapshot":
            from userland.coursework.grading_work import run_snapshot

            return run_snapshot(args.volume, args.path, args.out, args.max_bytes)
        return work(args.step)
    try:
        settings = Settings.from_env()
    except SettingsError as err:
        print(f"userland: {err}", file=sys.stderr)
        return 2
    # What is wrong with the command line and the settings is said first; the kubeconfig is
    # read last, just before the service starts (reading it may run an exec plugin).
    if args.command == "operator":
        from userland.operator.main import run_operator

        try:
            args.listen_address = parse_address(args.listen)
        except ValueError as err:
            print(f"userland operator: {err}", file=sys.stderr)
            return 2
        args.start_timeout = args.start_timeout if args.start_timeout > 0 else None
        if not _kubeconfig_ok(args):
            return 2
        return asyncio.run(run_operator(settings, args))
    if args.command == "gateway":
        # Each command imports what it runs (an assignment's worker Pod needs no Redis client).
        from userland.auth.dev_login import refusal as dev_login_refusal
        from userland.proxy.server import ServerOptions, parse_listen, run_gateway

        try:
            settings.require("identity_secret", "public_url", "redis_url")
            host, port = parse_listen(args.listen)
        except (SettingsError, ValueError) as err:
            print(f"userland: {err}", file=sys.stderr)
            return 2
        refusal = dev_login_refusal(settings, host)
        if refusal is not None:
            print(f"userland: refusing to start: {refusal}", file=sys.stderr)
            return 2
        if not _kubeconfig_ok(args):
            return 2
        if settings.dev_login:
            log.warning("development login is ON: anyone who can reach this loopback address can "
                        "sign in as any name; never use it outside a local setup",
                        extra={"event": "dev_login.enabled", "listen": f"{host}:{port}"})
        return _serving(args, lambda: run_gateway(settings, ServerOptions(
            host=host, port=port, kubeconfig=args.kubeconfig, workers=max(1, args.workers),
            grace=max(0.0, args.grace), log_level=args.log_level, metrics=not args.no_metrics)))
    if args.command == "store":
        from pathlib import Path

        from userland.coursework.store_main import ServeOptions, run_store
        from userland.proxy.server import parse_listen

        try:
            settings.require("store_secret")
            host, port = parse_listen(args.listen)
            internal = parse_listen(args.internal_listen) if args.internal_listen else None
        except (SettingsError, ValueError) as err:
            print(f"userland: {err}", file=sys.stderr)
            return 2
        return _serving(args, lambda: run_store(settings, ServeOptions(host, port, Path(args.data),
                                                                       internal)))
    if args.command == "web":
        from userland.proxy.server import parse_listen
        from userland.web.server import WebOptions, run_web

        try:
            settings.require("identity_secret", "public_url", "redis_url")
            host, port = parse_listen(args.listen)
        except (SettingsError, ValueError) as err:
            print(f"userland: {err}", file=sys.stderr)
            return 2
        if not _kubeconfig_ok(args):
            return 2
        return _serving(args, lambda: run_web(settings, WebOptions(host=host, port=port,
                                                                    kubeconfig=args.kubeconfig)))
    return 2


if __name__ == "__main__":
    sys.exit(main())
