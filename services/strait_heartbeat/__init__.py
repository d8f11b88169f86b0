"""The heartbeat service: MM2 heartbeats into each flow's source, liveness and latency seen on its target."""
