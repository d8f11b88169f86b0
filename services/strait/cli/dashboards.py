"""`strait dashboards`: install strait's Grafana dashboards into an existing Grafana, or export them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from strait.errors import ConfigError

TOKEN_ENV, USER_ENV, PASSWORD_ENV = "GRAFANA_TOKEN", "GRAFANA_USER", "GRAFANA_PASSWORD"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `dashboards` command group."""
    group = subparsers.add_parser("dashboards", help="install or export strait's Grafana dashboards")
    commands = group.add_subparsers(dest="dashboards_command", metavar="COMMAND", required=True)
    push = commands.add_parser(
        "push", help="install the Prometheus datasource and the dashboards into a running Grafana",
        description=f"Credentials come from the environment, never the command line: ${TOKEN_ENV} (a "
                    f"service-account token), else ${USER_ENV} and ${PASSWORD_ENV} (basic auth).")
    push.add_argument("--grafana-url", required=True, help="base URL of the Grafana, e.g. http://localhost:3000")
    push.add_argument("--prometheus-url", default="http://prometheus:9090",
                      help="URL Grafana reaches Prometheus at (default http://prometheus:9090)")
    push.add_argument("--folder", default="strait", help="folder title for the dashboards (uid strait)")
    push.add_argument("--json", action="store_true", help="print the result as JSON")
    push.set_defaults(handler=_push)
    export = commands.add_parser("export", help="write the dashboards' classic JSON files into a folder")
    export.add_argument("folder", type=Path, help="where to write <uid>.json")
    export.set_defaults(handler=_export)


def credential_from_env() -> str | tuple[str, str]:
    """A token from $GRAFANA_TOKEN, else (user, password) from $GRAFANA_USER/$GRAFANA_PASSWORD."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user and password:
        return (user, password)
    raise ConfigError(f"no Grafana credentials: set ${TOKEN_ENV}, or ${USER_ENV} and ${PASSWORD_ENV}")


def _push(args: argparse.Namespace) -> int:
    from strait.dashboards import push

    result = push(args.grafana_url, credential_from_env(), args.prometheus_url, folder=args.folder)
    if args.json:
        print(json.dumps({"datasource": result.datasource, "dashboards": result.dashboards}, indent=2))
    else:
        print(f"datasource prometheus {result.datasource}")
        for uid, url in result.dashboards.items():
            print(f"dashboard {uid:<16} {url}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from strait.dashboards import write_files

    for path in write_files(args.folder):
        print(path, file=sys.stdout)
    return 0
