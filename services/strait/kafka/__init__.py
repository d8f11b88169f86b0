"""Kafka helpers shared by the services and the replicator: admin calls with errors that name the
cluster and topic, and the remote-topic plan of a flow."""
