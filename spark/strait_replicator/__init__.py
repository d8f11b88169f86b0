"""strait's data plane: a PySpark Structured Streaming job that copies records between clusters.

One streaming query per enabled flow. Its source (:mod:`strait_replicator.source`) plans each
micro-batch as source offset ranges; Spark runs them as tasks, and each task copies its ranges with
confluent-kafka (:mod:`strait_replicator.writer`) and emits the exact offset syncs itself, which
Spark's Kafka sink could not (it writes no record timestamps and reports no target offsets).
"""
