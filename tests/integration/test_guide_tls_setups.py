"""The guides' TLS setups run end to end, on clusters that require what the guides configure.

* The AMQ Streams guide: a source cluster that requires client certificates, reached with a JKS
  truststore and a PKCS#12 keystore written by keytool, their passwords by reference. The
  replicator reads the stores into memory (:mod:`strait.config.keystores`); its consumer, the
  offset-sync producer (on the source, MM2's default) and its admin client all authenticate with the
  keystore. A client without a certificate is refused by the same listener, so the keystore is what
  lets the copy through; a wrong password is refused at ``config apply --dry-run``, naming cluster and key.
* The Strimzi / IBM Event Streams guide: its ``KafkaMirrorMaker2`` resource as written (SCRAM-SHA-512
  over TLS to the source, TLS client authentication to the target, Strimzi's identity policy class,
  secrets mounted as Kubernetes mounts them) applied with ``config from-strimzi --apply``; a
  replicator following Redis copies the selected topic under its own name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import ADMIN_USER, KafkaCluster, KafkaClusterSpec
from strait_lab.services import StraitProcess
from strait_lab.tls import make_java_stores
from tests.support.cli import strait
from tests.support.kafka import count, records_by_partition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

RECORDS = 300
PARTITIONS = 2
GUIDES = Path(__file__).resolve().parents[1] / "data" / "config"
STORE_PASSWORD = "amq-store-pw"
KEY_PASSWORD = "amq-key-pw"  # the JKS keystore's key has its own password (ssl.key.password)
MM2_USER, MM2_PASSWORD = "mm2-user", "strimzi-scram-pw"


def _started(spec: KafkaClusterSpec, lab_root: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(spec, lab_root / f"kafka-{spec.alias}-{uuid.uuid4().hex[:6]}")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def mtls_cluster(lab_root: Path) -> Iterator[KafkaCluster]:
    """Cluster M: its TLS listener requires a client certificate signed by its CA."""
    yield from _started(KafkaClusterSpec("M", tls=True, client_auth=True, overrides={"log.retention.ms": "-1"}),
                        lab_root)


@pytest.fixture(scope="module")
def scram_tls_cluster(lab_root: Path) -> Iterator[KafkaCluster]:
    """Cluster T: SASL_SSL with SCRAM-SHA-512, the Strimzi guide's user among its users."""
    yield from _started(KafkaClusterSpec("T", tls=True, sasl=True, overrides={"log.retention.ms": "-1"},
                                         scram_users={ADMIN_USER: "admin-secret", MM2_USER: MM2_PASSWORD}), lab_root)


def _properties(source: KafkaCluster, target: KafkaCluster, topic: str, truststore: Path, keystore: Path,
                keystore_type: str) -> str:
    return f"""clusters = S, B
S.bootstrap.servers = {source.ssl_bootstrap_servers}
S.security.protocol = SSL
S.ssl.truststore.location = {truststore}
S.ssl.truststore.password = ${{env:STRAIT_T_TRUSTSTORE_PW}}
S.ssl.keystore.type = {keystore_type}
S.ssl.keystore.location = {keystore}
S.ssl.keystore.password = ${{env:STRAIT_T_KEYSTORE_PW}}
S.ssl.key.password = ${{env:STRAIT_T_KEY_PW}}
B.bootstrap.servers = {target.bootstrap_servers}
replication.factor = 1
S->B.enabled = true
S->B.topics = {topic}
S->B.emit.heartbeats.enabled = false
"""


def _assert_refused_without_a_certificate(cluster: KafkaCluster) -> None:
    """The listener really requires a client certificate (the client is freed on return, ending its retries)."""
    certless = AdminClient({"bootstrap.servers": cluster.ssl_bootstrap_servers, "security.protocol": "SSL",
                            "ssl.ca.location": str(cluster.ca_path), "log_level": 0})
    with pytest.raises(KafkaException):
        certless.list_topics(timeout=5)


def test_a_jks_truststore_and_pkcs12_keystore_cluster_replicates(
        mtls_cluster: KafkaCluster, target_cluster: KafkaCluster, lab_root: Path, tmp_path: Path) -> None:
    source = mtls_cluster
    stores = make_java_stores(source.ca_path, source.client_keystore_path, tmp_path / "stores",
                              STORE_PASSWORD, KEY_PASSWORD)
    _assert_refused_without_a_certificate(source)

    topic = f"amq-tls-{uuid.uuid4().hex[:6]}"
    create_topic(source.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    produce(source.client_config(), topic, _keyed_records())
    config = tmp_path / "amq-tls.properties"
    config.write_text(_properties(source, target_cluster, topic, stores.truststore_jks, stores.keystore_p12, "PKCS12"))
    env = {"STRAIT_T_TRUSTSTORE_PW": STORE_PASSWORD, "STRAIT_T_KEYSTORE_PW": STORE_PASSWORD,
           "STRAIT_T_KEY_PW": STORE_PASSWORD}

    wrong = strait("config", "apply", "--dry-run", str(config), env={**env, "STRAIT_T_KEYSTORE_PW": "not-it"})
    assert wrong.returncode != 0 and "cluster S: ssl.keystore.location:" in wrong.stderr, wrong.stderr
    assert "password is wrong" in wrong.stderr and STORE_PASSWORD not in wrong.stderr + wrong.stdout
    jks_keystore = tmp_path / "amq-tls-jks.properties"
    jks_keystore.write_text(_properties(source, target_cluster, topic, stores.truststore_jks, stores.keystore_jks, "JKS"))
    ok = strait("config", "apply", "--dry-run", str(jks_keystore),
                env={**env, "STRAIT_T_KEY_PW": KEY_PASSWORD})
    assert ok.returncode == 0, ok.stderr

    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                            lab_root / "java-stores", env=env, name=f"replicator-{topic}")
    try:
        process.start(timeout=180)
        wait_for(lambda: count(target_cluster, f"S.{topic}") == RECORDS, 180, f"{RECORDS} records on S.{topic}")
        wait_for(lambda: count(source, "mm2-offset-syncs.B.internal") > 0, 60, "offset syncs written to S over mTLS")
    finally:
        process.stop()
    _assert_same_records(source, topic, target_cluster, f"S.{topic}")


def _assert_same_records(source: KafkaCluster, topic: str, target: KafkaCluster, remote: str) -> None:
    copied, original = records_by_partition(target, remote), records_by_partition(source, topic)
    assert {p: [(r.key, r.value, r.headers) for r in rs] for p, rs in copied.items()} == \
        {p: [(r.key, r.value, r.headers) for r in rs] for p, rs in original.items()}


def _keyed_records() -> list[Record]:
    return [Record(f"k{i % 5}".encode(), f"v{i}".encode(), partition=i % PARTITIONS, headers=[("h", str(i).encode())])
            for i in range(RECORDS)]


def _mount_secrets(folder: Path, source: KafkaCluster, target: KafkaCluster) -> Path:
    """The Kubernetes secrets the guide's resource names, laid out as Kubernetes mounts them."""
    pem = target.client_keystore_path.read_text()
    certificate_at = pem.index("-----BEGIN CERTIFICATE-----")
    for name, key, text in (("my-source-cluster-cluster-ca-cert", "ca.crt", source.ca_path.read_text()),
                            ("mm2-user", "password", MM2_PASSWORD),
                            ("my-target-cluster-cluster-ca-cert", "ca.crt", target.ca_path.read_text()),
                            ("mm2-tls-user", "user.crt", pem[certificate_at:]),
                            ("mm2-tls-user", "user.key", pem[:certificate_at])):
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / key).write_text(text)
        (folder / name / key).chmod(0o600)
    return folder


def test_the_strimzi_resource_replicates_end_to_end(
        scram_tls_cluster: KafkaCluster, mtls_cluster: KafkaCluster, redis_url: str, lab_root: Path,
        tmp_path: Path) -> None:
    source, target = scram_tls_cluster, mtls_cluster
    topic = f"orders.strimzi-{uuid.uuid4().hex[:6]}"
    create_topic(source.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    produce(source.client_config(), topic, _keyed_records())
    resource = yaml.safe_load((GUIDES / "strimzi-mm2.yaml").read_text())
    clusters = {c["alias"]: c for c in resource["spec"]["clusters"]}
    clusters["my-source-cluster"]["bootstrapServers"] = source.sasl_ssl_bootstrap_servers
    clusters["my-target-cluster"]["bootstrapServers"] = target.ssl_bootstrap_servers
    mirror = resource["spec"]["mirrors"][0]
    for connector in ("sourceConnector", "checkpointConnector"):  # one-broker clusters
        mirror[connector]["config"] = {key: 1 if key.endswith("replication.factor") else value
                                       for key, value in mirror[connector]["config"].items()}
    file = tmp_path / "mm2.yaml"
    file.write_text(yaml.safe_dump(resource, sort_keys=False))
    secrets = _mount_secrets(tmp_path / "secrets", source, target)

    applied = strait("config", "from-strimzi", str(file), "--secrets-dir", str(secrets), "--apply",
                     "--redis-url", redis_url)
    assert applied.returncode == 0 and "configuration stored as version" in applied.stderr, applied.stderr
    assert MM2_PASSWORD not in applied.stdout + applied.stderr
    process = StraitProcess("replicator", ["--state-dir", str(tmp_path / "state")], lab_root / "strimzi",
                            env={"STRAIT_REDIS_URL": redis_url}, name=f"replicator-{topic}")
    try:
        process.start(timeout=180)
        wait_for(lambda: count(target, topic) == RECORDS, 180, f"{RECORDS} records of {topic} on the target")
    finally:
        process.stop()
    _assert_same_records(source, topic, target, topic)  # Strimzi's identity policy: the same name
