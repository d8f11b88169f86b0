"""The checkpoint service: exact checkpoints of source consumer groups and group offset sync on the target."""
