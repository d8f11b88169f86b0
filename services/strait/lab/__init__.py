"""The embedded lab: real Kafka clusters, Redis and Prometheus as local processes on loopback.

Used by `make lab`, `strait lab up|down|status` and the pytest fixtures. Nothing here is mocked:
brokers run from Maven Central jars in KRaft mode, Redis and Prometheus from the OS packages.
"""
