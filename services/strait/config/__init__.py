"""strait's configuration: the model, its two file formats, secrets, validation and the Redis store.

- :mod:`~strait.config.model`: ``StraitConfig``, ``ClusterConfig``, ``FlowConfig`` (frozen).
- :mod:`~strait.config.yaml_loader` / :mod:`~strait.config.mm2_properties`: the two file formats.
- :mod:`~strait.config.document`: the mapping form shared by YAML and the stored JSON.
- :mod:`~strait.config.secrets`: ``${env:VAR}`` / ``${file:/path:key}`` references and masking.
- :mod:`~strait.config.store`: versioned storage in Redis and change notification (imported on
  its own, since it needs the coordination package).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strait.errors import ConfigError

if TYPE_CHECKING:
    from strait.config.model import StraitConfig

# Exported names and their modules, imported on first use: the replicator's Spark workers need the
# model alone, not the file formats (YAML) nor their dependencies.
_EXPORTS = {
    "config_from_dict": "strait.config.document", "config_to_dict": "strait.config.document",
    "load_mm2_properties": "strait.config.mm2_properties",
    "DEFAULT_REDIS_URL": "strait.config.model", "ClusterConfig": "strait.config.model",
    "FlowConfig": "strait.config.model", "Schedule": "strait.config.model", "Selection": "strait.config.model",
    "StraitConfig": "strait.config.model",
    "MASK": "strait.config.secrets", "Secret": "strait.config.secrets", "SecretRef": "strait.config.secrets",
    "is_secret_key": "strait.config.secrets", "mask_url": "strait.config.secrets",
    "load_yaml": "strait.config.yaml_loader",
}

__all__ = sorted([*_EXPORTS, "ConfigError", "file_format", "load_config"])


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


_YAML_SUFFIXES = (".yaml", ".yml")


def file_format(path: str | Path) -> str:
    """``yaml`` or ``mm2`` for a configuration file: by suffix, else by a look at its content."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in _YAML_SUFFIXES:
        return "yaml"
    if suffix == ".properties":
        return "mm2"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    block_keys = {line.strip() for line in text.splitlines()} & {"clusters:", "flows:"}
    return "yaml" if block_keys else "mm2"


def load_config(path: str | Path) -> StraitConfig:
    """Load a strait YAML file or an MM2 properties file (see :func:`file_format`)."""
    if file_format(path) == "yaml":
        from strait.config.yaml_loader import load_yaml
        return load_yaml(path)
    from strait.config.mm2_properties import load_mm2_properties
    return load_mm2_properties(path)
