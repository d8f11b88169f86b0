"""`strait config apply|show`: validate a configuration file, store it in Redis, print what is stored."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaException

from strait.settings import settings_of
from strait.config import DEFAULT_REDIS_URL, StraitConfig, config_to_dict, load_config, mask_url
from strait.config.secrets import mask_text, url_password
from strait.config.store import (
    ConfigStoreError, apply_config, check_storable, latest_version, read_durable_config, read_stored_config,
)
from strait.config.connect import load_connect
from strait.config.mm1 import Mm1Setup, from_mm1
from strait.config.mm2_properties import not_used_reason
from strait.config.model import FlowConfig
from strait.config.strimzi import load_strimzi
from strait.config.validate import check_key_stores, config_warnings, describe_inline_secrets, inline_secrets, \
    repartition_warning
from strait.kafka.admin import admin_client, cluster_topics
from strait.remote_topics import replicated_topics
from strait.coord.redis_client import CoordinationError, connect
from strait.errors import StraitError

REDIS_URL_ENV = "STRAIT_REDIS_URL"
TOPIC_LIST_TIMEOUT = 5.0  # naming a repartitioning flow's topics is best effort


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `config` command group."""
    config = subparsers.add_parser("config", help="validate, store and show the replication configuration")
    commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    redis_help = f"Redis to use (default: ${REDIS_URL_ENV}, else {DEFAULT_REDIS_URL}, the lab's)"

    apply = commands.add_parser(
        "apply", help="validate FILE (strait YAML or MM2 .properties) and store it as a new version",
        description="Validate FILE and store it in Redis as a new configuration version; every strait "
                    "process picks it up without restarting. Secrets must be ${env:VAR} or "
                    "${file:/path[:key]} references: inline secrets are refused (--dry-run accepts them).",
    )
    apply.add_argument("file", metavar="FILE", type=Path,
                       help="strait YAML (.yaml) or MM2 properties (.properties)")
    apply.add_argument("--redis-url", default=None, help=redis_help)
    apply.add_argument("--dry-run", action="store_true", help="validate and print the result; store nothing")
    apply.set_defaults(handler=_apply)

    mm1 = commands.add_parser(
        "from-mm1", help="turn a MirrorMaker 1 command line (its consumer and producer files) into a flow",
        description="Read kafka-mirror-maker.sh's --consumer.config and --producer.config files and its "
                    "topic list, print the strait flow they make as YAML (identity names, no internal topics "
                    "unless asked) and, with --apply, store it. Secrets stay in the MM1 files: the flow "
                    "refers to them with ${file:/path:key}, so every strait process must see those files.",
    )
    mm1.add_argument("--consumer.config", dest="consumer_config", required=True, type=Path, metavar="FILE",
                     help="MM1's consumer properties: the source cluster")
    mm1.add_argument("--producer.config", dest="producer_config", required=True, type=Path, metavar="FILE",
                     help="MM1's producer properties: the target cluster")
    mm1.add_argument("--whitelist", "--include", dest="whitelist", required=True, metavar="REGEX",
                     help="the topics to mirror, as MM1 takes them (a Java regex; ',' also separates)")
    mm1.add_argument("--num.streams", dest="num_streams", type=int, default=1, metavar="N",
                     help="accepted for MM1 command lines; strait copies each partition in a task of its own")
    mm1.add_argument("--source-alias", default="source", help="the source cluster's alias (default: source)")
    mm1.add_argument("--target-alias", default="target", help="the target cluster's alias (default: target)")
    mm1.add_argument("--checkpoints", action="store_true",
                     help="also write offset syncs and checkpoints, so consumers can fail over (MM1 had neither)")
    mm1.add_argument("--heartbeats", action="store_true", help="also emit heartbeats")
    mm1.add_argument("--apply", action="store_true", help="store the flow in Redis as a new configuration version")
    mm1.add_argument("--redis-url", default=None, help=redis_help)
    mm1.set_defaults(handler=_from_mm1)

    strimzi = commands.add_parser(
        "from-strimzi", help="turn a Strimzi KafkaMirrorMaker2 resource into strait flows",
        description="Read a KafkaMirrorMaker2 resource (kafka.strimzi.io/v1beta2) as written, print the "
                    "configuration it describes as YAML and, with --apply, store it. Kubernetes secrets it "
                    "names are read as files laid out as Kubernetes mounts them: DIR/<secretName>/<key>.",
    )
    strimzi.add_argument("file", metavar="FILE", type=Path, help="the KafkaMirrorMaker2 resource (YAML)")
    strimzi.add_argument("--secrets-dir", required=True, type=Path, metavar="DIR",
                         help="where the secrets the resource names are mounted (DIR/<secretName>/<key>)")
    strimzi.add_argument("--apply", action="store_true", help="store it in Redis as a new configuration version")
    strimzi.add_argument("--redis-url", default=None, help=redis_help)
    strimzi.set_defaults(handler=_from_strimzi)

    connect = commands.add_parser(
        "from-connect", help="turn MirrorMaker 2's Kafka Connect connector configs (JSON) into strait flows",
        description="Read the JSON configs of MM2's connectors as posted to a Connect cluster (MirrorSourceConnector, "
                    "MirrorCheckpointConnector, MirrorHeartbeatConnector; {\"name\": ..., \"config\": {...}} or the "
                    "bare config map), print the configuration they describe as YAML and, with --apply, store it. "
                    "MM2's progress is read, when strait takes over, from the worker's offsets topic under the source "
                    "connector's name.",
    )
    connect.add_argument("files", metavar="FILE", nargs="+", type=Path, help="connector JSON files")
    connect.add_argument("--offsets-topic", required=True, metavar="TOPIC",
                         help="the Connect worker's offset.storage.topic (on the target cluster)")
    connect.add_argument("--apply", action="store_true", help="store it in Redis as a new configuration version")
    connect.add_argument("--redis-url", default=None, help=redis_help)
    connect.set_defaults(handler=_from_connect)

    show = commands.add_parser("show", help="print the stored configuration, secrets masked")
    show.add_argument("--redis-url", default=None, help=redis_help)
    show.add_argument("--json", action="store_true", help="print as JSON")
    show.add_argument("--version", dest="config_version", type=int, default=None, metavar="N",
                      help="this version instead of the latest")
    show.set_defaults(handler=_show)


def redis_url(args: argparse.Namespace) -> str:
    """The Redis URL from --redis-url, else $STRAIT_REDIS_URL, else the embedded lab's (the settings')."""
    return settings_of(args).coordination_url()


def _apply(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    warn_about(config)
    check_stores(config)
    if args.dry_run:
        print(_as_yaml(config_to_dict(config, secrets="mask")), end="")
        refused = inline_secrets(config)
        if refused:
            keys = describe_inline_secrets(refused, str(args.file))
            print(f"strait: warning: apply would refuse the inline secrets at {keys}; use ${{env:VAR}} "
                  "or ${file:/path:key} references", file=sys.stderr)
        print(f"{args.file} is valid: {_summary(config)} (not stored: --dry-run)", file=sys.stderr)
        return 0
    check_storable(config, str(args.file))  # before connecting: nothing is stored on refusal
    url = redis_url(args)
    with _redis(url) as client:
        before = latest_version(client)
        version = apply_config(client, config, str(args.file), durable=settings_of(args).durable_config)
    state = "unchanged, still" if version == before else "stored as"
    print(f"configuration {state} version {version} in {mask_url(url)}: {_summary(config)}")
    return 0


def _from_mm1(args: argparse.Namespace) -> int:
    setup = Mm1Setup(args.consumer_config, args.producer_config, args.whitelist, args.num_streams,
                     args.source_alias, args.target_alias, args.checkpoints, args.heartbeats)
    made = from_mm1(setup)
    header = [f"strait flow made from kafka-mirror-maker.sh --consumer.config {args.consumer_config} "
              f"--producer.config {args.producer_config} --whitelist '{args.whitelist}'"]
    header += [f"not used (MM1 consumer/producer setting strait does not need): {s}" for s in made.unused]
    return _convert(args, made.config, header, f"from-mm1:{args.consumer_config},{args.producer_config}")


def _from_strimzi(args: argparse.Namespace) -> int:
    loaded = load_strimzi(args.file, args.secrets_dir.resolve())
    header = [f"strait configuration made from the KafkaMirrorMaker2 resource {args.file}"]
    header += [_not_used_line("a Connect or MM2 setting strait does not need", key) for key in loaded.ignored_keys]
    return _convert(args, loaded.config, header, f"from-strimzi:{args.file}")


def _from_connect(args: argparse.Namespace) -> int:
    loaded = load_connect(args.files, args.offsets_topic)
    header = [f"strait configuration made from MirrorMaker 2's Connect connectors {', '.join(map(str, args.files))}"]
    header += [_not_used_line("a Connect setting strait does not need", key) for key in loaded.ignored_keys]
    return _convert(args, loaded.config, header, f"from-connect:{','.join(map(str, args.files))}")


def _not_used_line(kind: str, key: str) -> str:
    """A header line naming a setting strait does not use and what it does instead."""
    instead = not_used_reason(key)
    return f"not used ({kind}): {key}" + (f": {instead}" if instead else "")


def _convert(args: argparse.Namespace, config: StraitConfig, header: list[str], source_name: str) -> int:
    """Print a converted configuration as YAML (with ``header`` as comments), warn, and store it with --apply."""
    for line in header:
        print(f"# {line}")
    print(_as_yaml(config_to_dict(config, secrets="references")), end="")
    warn_about(config)
    if not args.apply:
        return 0
    check_stores(config)
    url = redis_url(args)
    with _redis(url) as client:
        version = apply_config(client, config, source_name, durable=settings_of(args).durable_config)
    print(f"configuration stored as version {version} in {mask_url(url)}: {_summary(config)}", file=sys.stderr)
    return 0


def warn_about(config: StraitConfig) -> None:
    """Print, on standard error, what the configuration does that its author may not expect."""
    texts = config_warnings(config)
    texts += [repartition_warning(flow, _remote_topics(config, flow)) for flow in config.flows if flow.repartitions]
    for text in texts:
        print(f"strait: warning: {text}", file=sys.stderr)


def check_stores(config: StraitConfig) -> None:
    """Read the clusters' JKS and PKCS#12 stores now, so a missing file or a wrong password is refused
    before anything is stored (:func:`strait.config.validate.check_key_stores`)."""
    for text in check_key_stores(config):
        print(f"strait: warning: {text}", file=sys.stderr)


def _remote_topics(config: StraitConfig, flow: FlowConfig) -> list[str] | None:
    """The flow's remote topics as its source lists them now, or None when the source does not answer."""
    try:
        admin = admin_client(config.cluster(flow.source).librdkafka_config("admin"))
        _cluster_id, partitions = cluster_topics(admin, flow.source, TOPIC_LIST_TIMEOUT)
    except (StraitError, KafkaException):
        return None
    return [topic.remote for topic in replicated_topics(flow, partitions)]


def _show(args: argparse.Namespace) -> int:
    url = redis_url(args)
    with _redis(url) as client:
        try:
            stored = read_stored_config(client, args.config_version)
        except ConfigStoreError:
            durable = settings_of(args).durable_config
            if durable is None or args.config_version is not None:
                raise
            stored = read_durable_config(durable, settings_of(args).namespace)
            print(f"strait: Redis holds no configuration; showing the durable copy in {durable.describe()} "
                  "(the services put it back into Redis within seconds)", file=sys.stderr)
    body = config_to_dict(stored.config, secrets="mask")
    if args.json:
        meta = {"version": stored.version, "source": stored.source, "applied_at": stored.applied_at}
        print(json.dumps({**meta, "config": body}, indent=2))
        return 0
    print(f"# strait configuration version {stored.version}, "
          f"applied from {stored.source} at {stored.applied_at}")
    print(_as_yaml(body), end="")
    return 0


def _summary(config: StraitConfig) -> str:
    flows = ", ".join(flow.name + ("" if flow.enabled else " (disabled)") for flow in config.flows) or "none"
    return f"clusters {', '.join(config.clusters) or 'none'}; flows {flows}"


def _as_yaml(body: dict[str, Any]) -> str:
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=120)


@contextmanager
def _redis(url: str) -> Iterator[Any]:
    """A checked Redis client for one command; failing to reach it is one clear strait error."""
    try:
        client = connect(url)
    except CoordinationError as exc:
        problem = mask_text(str(exc), [url_password(url) or ""])
        raise StraitError(f"{problem} (Redis URL from --redis-url, ${REDIS_URL_ENV} or the lab's default "
                          f"{DEFAULT_REDIS_URL}; `strait lab up` starts the lab)") from None
    try:
        yield client
    finally:
        client.close()
