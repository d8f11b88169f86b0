"""The runtime packages import nothing from the development tools, the tests or dev-only libraries.

What the services, the replicator and the `strait` command import at run time is every module of
the runtime packages; each is imported in a fresh interpreter where the tools and every dev-only
distribution refuse to load, as they are absent from a production install (the images).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

RUNTIME_PACKAGES = ("strait", "strait_checkpoint", "strait_configsync", "strait_heartbeat", "strait_replicator")
# The tools/ project, the test suite and the `dev` extra's libraries (with their import names).
DEV_ONLY = ("strait_lab", "strait_bench", "tests", "pytest", "_pytest", "hypothesis", "testcontainers",
            "jsonschema", "psutil", "matplotlib")

# A library may try an optional import of a dev-only package: refused, it goes on without it.
_REFUSE_DEV_ONLY = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    dev_only = tuple(sys.argv[1].split(","))

    class RefuseDevOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in dev_only:
                raise ImportError(f"dev-only module {name} imported at run time")
            return None

    sys.meta_path.insert(0, RefuseDevOnly())
""")

_PROBE = _REFUSE_DEV_ONLY + textwrap.dedent("""
    runtime = sys.argv[2].split(",")
    modules = []
    for package in runtime:
        root = importlib.import_module(package)
        modules.append(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue  # running it would start the component; its imports are its app's
            if info.name == "strait_replicator._copyloop":
                continue  # loaded below as the replicator loads it: after confluent-kafka's librdkafka
            importlib.import_module(info.name)
            modules.append(info.name)
    from strait_replicator.native import native_copy_class
    native_copy_class()
    modules.append("strait_replicator._copyloop")
    loaded = sorted(name for name in sys.modules if name.split(".")[0] in dev_only)
    assert not loaded, loaded
    print(len(modules))
""")


def test_every_runtime_module_imports_without_the_tools_or_dev_dependencies() -> None:
    result = subprocess.run([sys.executable, "-c", _PROBE, ",".join(DEV_ONLY), ",".join(RUNTIME_PACKAGES)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.strip()) > 80  # every module was walked, not just the package roots


def test_the_command_line_builds_without_the_tools() -> None:
    probe = _REFUSE_DEV_ONLY + textwrap.dedent("""
        from importlib import metadata
        metadata.entry_points = lambda **_: []  # as in an image: no tools distribution installed
        from strait.cli import build_parser
        commands = build_parser()._subparsers._group_actions[0].choices
        assert "run" in commands and "lab" not in commands, sorted(commands)
    """)
    result = subprocess.run([sys.executable, "-c", probe, ",".join(DEV_ONLY)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
