"""The AMQ Streams guide's TLS setup runs: a source cluster that requires client certificates, reached
with a JKS truststore and a PKCS#12 keystore written by keytool, their passwords by reference.

The replicator reads the stores into memory (:mod:`strait.config.keystores`); its consumer, the
offset-sync producer (on the source, MM2's default) and its admin client all authenticate with the
keystore. A client without a certificate is refused by the same listener, so the keystore is what
lets the copy through; a wrong password is refused at ``config apply --dry-run``, naming cluster and key.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.services import StraitProcess
from strait_lab.tls import make_java_stores
from tests.integration.replicator_support import count, records_by_partition, wait_for

pytestmark = pytest.mark.slow

RECORDS = 300
PARTITIONS = 2
STORE_PASSWORD = "amq-store-pw"
KEY_PASSWORD = "amq-key-pw"  # the JKS keystore's key has its own password (ssl.key.password)


@pytest.fixture(scope="module")
def mtls_source(lab_root: Path) -> Iterator[KafkaCluster]:
    """Cluster S: its TLS listener requires a client certificate signed by its CA."""
    cluster = KafkaCluster(KafkaClusterSpec("S", tls=True, client_auth=True, overrides={"log.retention.ms": "-1"}),
                           lab_root / f"kafka-S-mtls-{uuid.uuid4().hex[:6]}")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


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


def _strait(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strait.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_a_jks_truststore_and_pkcs12_keystore_cluster_replicates(
        mtls_source: KafkaCluster, target_cluster: KafkaCluster, lab_root: Path, tmp_path: Path) -> None:
    source = mtls_source
    stores = make_java_stores(source.ca_path, source.client_keystore_path, tmp_path / "stores",
                              STORE_PASSWORD, KEY_PASSWORD)
    _assert_refused_without_a_certificate(source)

    topic = f"amq-tls-{uuid.uuid4().hex[:6]}"
    create_topic(source.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    produce(source.client_config(), topic, [Record(f"k{i % 5}".encode(), f"v{i}".encode(), partition=i % PARTITIONS,
                                                   headers=[("h", str(i).encode())]) for i in range(RECORDS)])
    config = tmp_path / "amq-tls.properties"
    config.write_text(_properties(source, target_cluster, topic, stores.truststore_jks, stores.keystore_p12, "PKCS12"))
    env = {"STRAIT_T_TRUSTSTORE_PW": STORE_PASSWORD, "STRAIT_T_KEYSTORE_PW": STORE_PASSWORD,
           "STRAIT_T_KEY_PW": STORE_PASSWORD}

    wrong = _strait({**env, "STRAIT_T_KEYSTORE_PW": "not-it"}, "config", "apply", "--dry-run", str(config))
    assert wrong.returncode != 0 and "cluster S: ssl.keystore.location:" in wrong.stderr, wrong.stderr
    assert "password is wrong" in wrong.stderr and STORE_PASSWORD not in wrong.stderr + wrong.stdout
    jks_keystore = tmp_path / "amq-tls-jks.properties"
    jks_keystore.write_text(_properties(source, target_cluster, topic, stores.truststore_jks, stores.keystore_jks, "JKS"))
    ok = _strait({**env, "STRAIT_T_KEY_PW": KEY_PASSWORD}, "config", "apply", "--dry-run", str(jks_keystore))
    assert ok.returncode == 0, ok.stderr

    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                            lab_root / "java-stores", env=env, name=f"replicator-{topic}")
    try:
        process.start(timeout=180)
        wait_for(lambda: count(target_cluster, f"S.{topic}") == RECORDS, 180, f"{RECORDS} records on S.{topic}")
        wait_for(lambda: count(source, "mm2-offset-syncs.B.internal") > 0, 60, "offset syncs written to S over mTLS")
    finally:
        process.stop()
    copied, original = records_by_partition(target_cluster, f"S.{topic}"), records_by_partition(source, topic)
    assert {p: [(r.key, r.value, r.headers) for r in rs] for p, rs in copied.items()} == \
        {p: [(r.key, r.value, r.headers) for r in rs] for p, rs in original.items()}
