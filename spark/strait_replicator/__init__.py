"""strait's data plane: a PySpark Structured Streaming job that copies records between clusters.

One streaming query per enabled flow reads the source with Spark's Kafka source; Spark's Kafka sink
cannot write record timestamps nor report target offsets, so each task produces its records with
confluent-kafka (:mod:`strait_replicator.writer`) and emits the exact offset syncs itself.
"""
