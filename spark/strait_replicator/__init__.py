"""strait's data plane: a PySpark Structured Streaming job that copies records between clusters.

One streaming query per enabled flow. Its source (:mod:`strait_replicator.source`) plans each
micro-batch as an *epoch* of a minute: the offsets each partition starts from and the Spark tasks
that copy them live with confluent-kafka (:mod:`strait_replicator.writer`), emitting the exact
offset syncs themselves, which Spark's Kafka sink could not (it writes no record timestamps and
reports no target offsets). Running tasks report what they copied about every half second
(:mod:`strait_replicator.live`), for live metrics and so that a restarted epoch resumes where it got
to. Tasks and driver exchange everything through the target cluster; the driver alone reads Spark's
checkpoint (:mod:`strait_replicator.state`), so local mode and a multi-host cluster run one design.
"""

import faulthandler

# Every process that imports the data plane (the driver, Spark's Python planner and workers) runs
# native clients (librdkafka, the C copy loop): a crash there prints each thread's Python stack to
# stderr, which Spark passes to the driver's log, instead of only an EOF on the JVM's side.
if not faulthandler.is_enabled():
    try:
        faulthandler.enable()
    except (RuntimeError, ValueError, OSError):  # no stderr with a file descriptor: nowhere to print
        pass
