"""strait: cross-cluster Apache Kafka replication.

The `strait` package is the shared home of the domain (configuration, replication policy, filters,
MM2-compatible record formats, Redis coordination, Kafka admin and metrics helpers), the lab runtime
and the command line. Each service package holds only its own loop and imports from here.
"""

__version__ = "0.1.0"
