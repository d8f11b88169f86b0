"""The bad-input catalogue, configuration part: every bad file is refused with one clear line.

Each entry is refused by the library (``load_config`` raises :class:`ConfigError` naming the file
and the culprit: line, key, cluster alias, pattern or loop) and by the command line, both by
``strait config apply FILE`` (before any connection to Redis) and by ``strait run COMPONENT
--config FILE`` (before the component starts its work): exit code 1, the same message on stderr,
no traceback. The runtime entries are in ``tests/integration/test_bad_input_catalogue.py``.
"""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from strait.config import load_config
from strait.errors import ConfigError
from tests.support.cli import strait
from tests.support.config import strait_config, write_config

CLUSTERS_YAML = """\
clusters:
  A: {bootstrap_servers: "a:9092"}
  B: {bootstrap_servers: "b:9092"}
"""
CLUSTERS_PROPERTIES = """\
clusters = A, B
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
"""
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# Nothing listens here: a command that tried to store the file would fail on the connection instead.
UNREACHABLE_REDIS = "redis://127.0.0.1:9"


@dataclass(frozen=True)
class BadFile:
    """One catalogue entry: a file name, its text, and what the error must say about the culprit."""

    name: str
    text: str
    says: tuple[str, ...]


CATALOGUE = [
    BadFile("malformed.yaml", "clusters:\n  A: {bootstrap_servers: a:9092\n  B: x\n",
            ("line 3", "malformed YAML")),
    BadFile("malformed.properties", CLUSTERS_PROPERTIES + "A->B.enabled = true\nA->B.topics = caf\\u00G9\n",
            (":5:", "malformed \\uxxxx escape")),
    BadFile("unknown-alias.yaml", CLUSTERS_YAML + "flows:\n  - {source: A, target: D}\n",
            ("flows[0] (A->D)", "target cluster 'D' is not defined (clusters: A, B)")),
    BadFile("unknown-alias.properties", CLUSTERS_PROPERTIES + "A->D.enabled = true\n",
            ("line 4", "A->D.enabled", "flow A->D names a cluster not listed in clusters = A, B")),
    BadFile("bad-regex.yaml", CLUSTERS_YAML + "flows:\n  - {source: A, target: B, topics: {include: [orders, 'c(']}}\n",
            ("flows[0].topics.include[1]", "invalid regular expression 'c('")),
    BadFile("bad-regex.properties", CLUSTERS_PROPERTIES + "A->B.enabled = true\nA->B.topics = orders, c(\n",
            ("line 5", "A->B.topics entry 2", "invalid regular expression 'c('")),
    BadFile("cycle.yaml", CLUSTERS_YAML + "flows:\n"
            "  - {source: A, target: B, replication_policy: identity}\n"
            "  - {source: B, target: A, replication_policy: identity}\n",
            ("flows A->B, B->A", "form a loop (A -> B -> A)", "identity replication policy", "disable one of them")),
    BadFile("cycle.properties", CLUSTERS_PROPERTIES + f"A->B.enabled = true\nB->A.enabled = true\n"
            f"replication.policy.class = {IDENTITY}\n",
            ("flows A->B, B->A", "form a loop (A -> B -> A)", "identity replication policy")),
]
IDS = [entry.name for entry in CATALOGUE]


def _write(tmp_path: Path, entry: BadFile) -> Path:
    path = tmp_path / entry.name
    path.write_text(textwrap.dedent(entry.text))
    return path


def _assert_refused(result: subprocess.CompletedProcess[str], path: Path, entry: BadFile) -> None:
    """Exit code 1 and, as the last line of stderr, strait's one-line error naming file and culprit."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"strait: error: {path}"), last
    for fragment in entry.says:
        assert fragment in last, (fragment, last)


@pytest.mark.parametrize("entry", CATALOGUE, ids=IDS)
def test_library_refuses_the_file_naming_file_and_culprit(tmp_path: Path, entry: BadFile) -> None:
    path = _write(tmp_path, entry)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(str(path)), message
    for fragment in entry.says:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("entry", CATALOGUE, ids=IDS)
def test_config_apply_refuses_the_file_before_connecting(tmp_path: Path, entry: BadFile) -> None:
    path = _write(tmp_path, entry)
    _assert_refused(strait("config", "apply", str(path), "--redis-url", UNREACHABLE_REDIS), path, entry)


@pytest.mark.parametrize("entry", CATALOGUE, ids=IDS)
def test_run_replicator_refuses_the_file_before_starting_spark(tmp_path: Path, entry: BadFile) -> None:
    path = _write(tmp_path, entry)
    result = strait("run", "replicator", "--config", str(path), "--state-dir", str(tmp_path / "state"))
    _assert_refused(result, path, entry)
    assert not (tmp_path / "state").exists()  # no flow was set up


@pytest.mark.parametrize("component", ["checkpoint", "heartbeat", "configsync"])
@pytest.mark.parametrize("entry", [CATALOGUE[2], CATALOGUE[5]], ids=[CATALOGUE[2].name, CATALOGUE[5].name])
def test_run_service_refuses_the_file(tmp_path: Path, component: str, entry: BadFile) -> None:
    path = _write(tmp_path, entry)
    _assert_refused(strait("run", component, "--config", str(path)), path, entry)


def test_run_replicator_exits_with_a_clear_error_when_spark_cannot_start(tmp_path: Path) -> None:
    """The session starts in a thread while the flows plan: its failure must still end the process
    (no copying goes on without Spark), with a message that says what to check, not hang planning
    against clusters that do not answer."""
    config = write_config(tmp_path / "s.yaml", strait_config(
        {"A": {"bootstrap_servers": "127.0.0.1:1"}, "B": {"bootstrap_servers": "127.0.0.1:2"}},
        [{"source": "A", "target": "B", "topics": {"include": ["t"]}}]))
    result = strait("run", "replicator", "--config", str(config), "--state-dir", str(tmp_path / "state"),
                    env={"JAVA_HOME": str(tmp_path / "no-java")}, timeout=90)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Spark's session did not start" in result.stderr and "Java" in result.stderr, result.stderr[-2000:]
