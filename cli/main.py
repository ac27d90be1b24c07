"""The `userland` command: one entry point, a subcommand per service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from userland.platform.logs import setup_logging
from userland.platform.settings import Settings, SettingsError, dev_login_refusal

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

    wb = sub.add_parser("web", help="run the web UI (instructors' courses, students' environments)")
    wb.add_argument("--listen", default="0.0.0.0:8080", help="address to serve on (behind the gateway)")
    wb.add_argument("--kubeconfig", default=None,
                    help="kubeconfig file (default: in-cluster, then ~/.kube/config)")

    lo = sub.add_parser("local", help="the whole platform on this machine (make run); Ctrl-C stops it all")
    lo.add_argument("--port", type=int, default=8000, help="gateway port on 127.0.0.1 (default 8000)")
    lo.add_argument("--state-dir", default=None, help="state and logs (default: .run/ in the checkout)")
    lo.add_argument("--students", default="alice,bob,carol",
                    help="logins that get a demo environment (comma-separated)")
    lo.add_argument("--reset", action="store_true", help="delete the state from earlier runs first")
    return parser


def _local(args: argparse.Namespace) -> int:
    from pathlib import Path

    from userland.local.setup import LocalOptions, default_state_dir, run_local
    from userland.platform import naming

    try:
        students = tuple(naming.normalize_login(s.strip()) for s in args.students.split(",") if s.strip())
    except naming.InvalidName as err:
        print(f"userland local: --students: {err}", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir).resolve() if args.state_dir else default_state_dir()
    return run_local(LocalOptions(state_dir=state_dir, port=args.port, students=students, reset=args.reset))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    if args.command == "local":
        return _local(args)
    try:
        settings = Settings.from_env()
    except SettingsError as err:
        print(f"userland: {err}", file=sys.stderr)
        return 2
    if args.command == "operator":
        from userland.operator.main import run_operator

        return asyncio.run(run_operator(settings, args))
    if args.command == "gateway":
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
        if settings.dev_login:
            log.warning("development login is ON: anyone who can reach this loopback address can "
                        "sign in as any name; never use it outside a local setup",
                        extra={"event": "dev_login.enabled", "listen": f"{host}:{port}"})
        return run_gateway(settings, ServerOptions(
            host=host, port=port, kubeconfig=args.kubeconfig, workers=max(1, args.workers),
            grace=max(0.0, args.grace), log_level=args.log_level))
    if args.command == "web":
        from userland.proxy.server import parse_listen
        from userland.web.server import WebOptions, run_web

        try:
            settings.require("identity_secret", "public_url", "redis_url")
            host, port = parse_listen(args.listen)
        except (SettingsError, ValueError) as err:
            print(f"userland: {err}", file=sys.stderr)
            return 2
        return run_web(settings, WebOptions(host=host, port=port, kubeconfig=args.kubeconfig))
    return 2


if __name__ == "__main__":
    sys.exit(main())
