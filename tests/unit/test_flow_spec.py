"""The flow spec: one object built from the configuration for the copy, the resume evidence and the
progress log of a flow."""

from __future__ import annotations

import pickle

from strait.config.document import config_from_dict
from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec, SharedRemote, flow_spec, shared_remotes
from strait.policy import DefaultReplicationPolicy
from strait_replicator.live import ProgressLog
from strait_replicator.writer import consumer_settings, producer_settings


def _config(**flow: object) -> object:
    return config_from_dict({
        "clusters": {"A": {"bootstrap_servers": "a:9092", "consumer": {"fetch.min.bytes": "2"}},
                     "B": {"bootstrap_servers": "b:9092"}},
        "flows": [{"source": "A", "target": "B", **flow}],
    }, "spec.yaml")


def test_the_spec_holds_each_clusters_settings_and_the_flows_topics_once() -> None:
    config = _config()
    flow = config.flows[0]
    spec = flow_spec(config, flow, [("orders", "A.orders"), ("audit", "archive.audit")], None)
    names = flow.topic_names()
    assert dict(spec.source_admin)["bootstrap.servers"] == "a:9092"
    assert dict(spec.target_producer)["bootstrap.servers"] == "b:9092"
    assert dict(spec.source_consumer) == config.cluster("A").librdkafka_config("consumer")
    assert spec.syncs == names.offset_syncs and spec.progress == names.progress
    assert spec.remote_topic("audit") == "archive.audit" and spec.remote_topic("new") == "A.new"
    assert not spec.repartition and spec.shared == () and spec.start == flow.start
    # what the copy, the progress log and the resume read come from it
    assert producer_settings(spec.target_producer)["bootstrap.servers"] == "b:9092"
    assert consumer_settings(spec)["bootstrap.servers"] == "a:9092" and consumer_settings(spec)["fetch.min.bytes"] == "2"
    assert ProgressLog.of(spec) == ProgressLog(flow.name, "A", "B", names.progress.topic, spec.target_consumer)


def test_equal_configurations_give_equal_hashable_specs_that_survive_pickling() -> None:
    config = _config()
    first = flow_spec(config, config.flows[0], [("orders", "A.orders")], None)
    again = flow_spec(config, config.flows[0], {"orders": "A.orders"}.items(), None)
    assert first == again and hash(first) == hash(again)
    assert pickle.loads(pickle.dumps(first)) == first
    assert flow_spec(config, config.flows[0], [("orders", "A.orders")], "latest") != first


def test_a_repartitioning_flow_writes_no_syncs_and_places_records_by_key() -> None:
    config = _config(target_partitions=3)
    spec = flow_spec(config, config.flows[0], [("orders", "A.orders")], "earliest")
    assert spec.repartition and spec.syncs is None and spec.start == "earliest"
    assert dict(spec.target_producer)["partitioner"] == "murmur2_random"


def test_settings_given_as_dicts_are_kept_as_sorted_pairs() -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), target_producer={"z": "1", "a": "2"},
                    syncs=SyncsLocation("A", "syncs"))
    assert spec.target_producer == (("a", "2"), ("z", "1")) and ProgressLog.of(spec) is None


def test_flows_aggregating_into_one_remote_topic_know_each_other() -> None:
    """Flows to one target whose policies name the same remote topic: each reads the other's progress
    before it takes the remote's records for copies no evidence explains."""
    config = config_from_dict({
        "clusters": {alias: {"bootstrap_servers": f"{alias.lower()}:9092"} for alias in ("A", "B", "C", "D")},
        "flows": [
            {"source": "A", "target": "C", "topics": {"include": ["orders"]}, "target_partitions": 3,
             "replication_policy": "identity"},
            {"source": "B", "target": "C", "topics": {"include": ["orders"]}, "target_partitions": 3,
             "replication_policy": "identity"},
            {"source": "D", "target": "C", "topics": {"include": ["orders"]}},  # default policy: D.orders
            {"source": "B", "target": "A", "topics": {"include": ["orders"]},
             "replication_policy": "identity"},
        ],
    }, "aggregate.yaml")
    a_to_c = config.flows[0]
    shared = shared_remotes(config, a_to_c, {"orders": "orders"})
    assert [(s.remote, s.flow, s.source_alias, s.topic) for s in shared] == \
        [("orders", "B->C", "B", "orders")]
    assert shared[0] == SharedRemote("orders", "B->C", "B", "orders", config.flows[1].topic_names().progress)
