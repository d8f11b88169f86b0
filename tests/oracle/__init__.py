"""MirrorMaker 2's own classes as the compatibility oracle of the tests (a JVM answering requests)."""
