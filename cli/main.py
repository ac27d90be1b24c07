"""The `userland` command: one entry point, a subcommand per service."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from userland.platform.logs import setup_logging
from userland.platform.settings import Settings, SettingsError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="userland", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    op = sub.add_parser("operator", help="run the controller (Template + Userland -> workloads)")
    op.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    op.add_argument("--listen", default="0.0.0.0:8081", help="address for /healthz and /metrics")
    op.add_argument("--workers", type=int, default=16, help="reconcile workers")
    op.add_argument("--identity", default=None, help="leader-election identity (default: hostname-pid)")
    op.add_argument("--no-leader-election", action="store_true",
                    help="act without a Lease (only when exactly one operator runs)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        settings = Settings.from_env()
    except SettingsError as err:
        print(f"userland: {err}", file=sys.stderr)
        return 2
    if args.command == "operator":
        from userland.operator.main import run_operator

        return asyncio.run(run_operator(settings, args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
