"""configsync: keeps each flow's target like its source (topics, partitions, configs, ACLs, internal topics).

:mod:`~strait_configsync.app` is the process and its control loop, :mod:`~strait_configsync.worker`
the per-flow thread, :mod:`~strait_configsync.sync` one sync pass, and :mod:`~strait_configsync.acls`,
:mod:`~strait_configsync.configs` and :mod:`~strait_configsync.ownership` the rules it applies.
"""
