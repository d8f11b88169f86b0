"""Print the project's run-time dependencies (pyproject.toml's ``[project] dependencies``), one per line.

The images install these in a layer of their own, before the source is copied in: a change to the
source then rebuilds only the small layer that installs strait itself (``pip install --no-deps``).
"""

import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as project:
    print("\n".join(tomllib.load(project)["project"]["dependencies"]))
