"""`make bench`: strait's replicator against MirrorMaker 2 and the target's produce limit, one machine.

Run ``python -m strait_bench --help`` for the sizes; the report (JSON, Markdown, PNG) goes to
``.cache/bench/<timestamp>/``.
"""
