"""Ownership-aware topic-config diff: what to SET and DELETE on a remote topic, and what strait owns.

* The source's wanted values are :func:`strait.kafka.configs.carried_configs`: the overrides set on
  the source topic itself (read-only, sensitive and excluded properties left out), and with
  ``use_defaults_from: source`` its default values too; otherwise the target's own defaults apply.
* A key is SET only when the target's value differs, so nothing else on the target is touched.
* A key is DELETEd only when strait owns it (it set it, or found it set to the source's value on
  the topic) and the source no longer sets it. Overrides made on the target alone are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strait.kafka.configs import ConfigChange, ConfigValue


@dataclass(frozen=True)
class ConfigPlan:
    """The change for one remote topic and the keys strait owns once it is applied."""

    change: ConfigChange
    owned_after: frozenset[str]


def plan_configs(wanted: Mapping[str, str], target: Mapping[str, ConfigValue], owned: frozenset[str]) -> ConfigPlan:
    """What to change on the remote topic so it carries ``wanted``, given the keys strait ``owned``."""
    to_set = {name: value for name, value in wanted.items()
              if name not in target or target[name].value != value}
    # A topic-level value equal to the source's was put there by strait (at creation, or by a
    # sync whose ownership record was lost); claiming it lets a later removal on the source follow.
    claimed = {name for name, value in wanted.items()
               if name in target and target[name].is_topic_override and target[name].value == value}
    to_delete = tuple(sorted(name for name in owned
                             if name not in wanted and name in target and target[name].is_topic_override))
    kept = {name for name in owned if name in wanted}
    return ConfigPlan(ConfigChange(to_set, to_delete), frozenset(kept | claimed | set(to_set)))


def drifted_keys(wanted: Mapping[str, str], target: Mapping[str, ConfigValue]) -> list[str]:
    """Keys whose target value differs from the source's wanted value."""
    return sorted(name for name, value in wanted.items() if name not in target or target[name].value != value)
