"""Read strait's YAML configuration file (schema: :mod:`strait.config.document`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from strait.config.document import config_from_dict
from strait.config.model import StraitConfig
from strait.errors import ConfigError

log = logging.getLogger(__name__)


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses a key repeated in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise ConfigError(f"line {line}: key {key!r} appears twice in one mapping "
                              f"(also line {seen[key]})")
        if isinstance(key, (str, int, float, bool)):
            seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, origin: str) -> Any:
    """The data of a YAML text; malformed YAML raises ConfigError naming ``origin`` and the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(f"{origin}: {where}malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: malformed YAML: {exc}") from None


def load_yaml(path: str | Path) -> StraitConfig:
    """Load and validate a strait YAML configuration file.

    Raises ConfigError naming the file, the key path and the problem (all problems at once).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    config = config_from_dict(parse_yaml(text, str(path)), str(path))
    log.info("loaded configuration file=%s clusters=%d flows=%d",
             path, len(config.clusters), len(config.flows))
    return config
