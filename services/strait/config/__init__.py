"""strait's configuration: the model, its two file formats, secrets, validation and the Redis store.

- :mod:`~strait.config.model`: ``StraitConfig``, ``ClusterConfig``, ``FlowConfig`` (frozen).
- :mod:`~strait.config.yaml_loader` / :mod:`~strait.config.mm2_properties`: the two file formats.
- :mod:`~strait.config.document`: the mapping form shared by YAML and the stored JSON.
- :mod:`~strait.config.secrets`: ``${env:VAR}`` / ``${file:/path:key}`` references and masking.
- :mod:`~strait.config.store`: versioned storage in Redis and change notification (imported on
  its own, since it needs the coordination package).
"""

from __future__ import annotations

from pathlib import Path

from strait.config.document import config_from_dict, config_to_dict
from strait.config.mm2_properties import load_mm2_properties
from strait.config.model import (
    DEFAULT_REDIS_URL,
    ClusterConfig,
    FlowConfig,
    Schedule,
    Selection,
    StraitConfig,
)
from strait.config.secrets import MASK, Secret, SecretRef, is_secret_key, mask_url
from strait.config.yaml_loader import load_yaml
from strait.errors import ConfigError

__all__ = [
    "DEFAULT_REDIS_URL",
    "MASK",
    "ClusterConfig",
    "ConfigError",
    "FlowConfig",
    "Schedule",
    "Secret",
    "SecretRef",
    "Selection",
    "StraitConfig",
    "config_from_dict",
    "config_to_dict",
    "file_format",
    "is_secret_key",
    "load_config",
    "load_mm2_properties",
    "load_yaml",
    "mask_url",
]

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
    return load_yaml(path) if file_format(path) == "yaml" else load_mm2_properties(path)
