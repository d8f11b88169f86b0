"""Topic, group and topic-config-property filters with MirrorMaker 2's defaults and matching rules.

Each list of regular expressions is joined with ``|`` and must match the *whole* name (Java's
``Matcher.matches()``); exclusions win over inclusions; an empty list matches nothing. Lists come
as Python sequences or as MM2's comma-separated property strings. The defaults are those of
Kafka 4.x's ``DefaultTopicFilter``, ``DefaultGroupFilter`` and ``DefaultConfigPropertyFilter``.

Patterns are compiled with Python's ``re`` in ASCII mode, which is how Java treats ``\\w``, ``\\d``,
``\\s`` and ``(?i)`` by default. An entry starting with inline flags (``(?i)orders.*``) behaves as in
Java, where the flags also apply to every later entry of the joined list. Java-only syntax
(``\\p{Alpha}``, ``\\Q...\\E``, flags in the middle of an entry) is rejected with a
:class:`FilterPatternError` rather than silently meaning something else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from strait.errors import ConfigError

PatternList = str | Sequence[str]

TOPICS_INCLUDE_DEFAULT: tuple[str, ...] = (".*",)
TOPICS_EXCLUDE_DEFAULT: tuple[str, ...] = (r"mm2.*\.internal", r".*\.replica", r"__.*")
# Kafka 3.x's default; 4.0 (KAFKA-17200) narrowed it so user topics named *.internal replicate.
TOPICS_EXCLUDE_DEFAULT_KAFKA_3: tuple[str, ...] = (r".*[\-\.]internal", r".*\.replica", r"__.*")
GROUPS_INCLUDE_DEFAULT: tuple[str, ...] = (".*",)
GROUPS_EXCLUDE_DEFAULT: tuple[str, ...] = (r"console-consumer-.*", r"connect-.*", r"__.*")
CONFIG_PROPERTIES_EXCLUDE_DEFAULT: tuple[str, ...] = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    # Broker-level names, not topic configs: Kafka lists them anyway; kept for identical behaviour.
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
)
USE_DEFAULTS_FROM_VALUES = ("target", "source")

_LIST_SPLIT = re.compile(r"\s*,\s*")
_LEADING_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?\)")
_PYTHON_SCOPED_FLAGS = "imsx"


class FilterPatternError(ConfigError):
    """A filter list is malformed or holds a regular expression that does not compile.

    ``pattern`` is the offending entry (or the whole list value), so callers can add file and key.
    """

    def __init__(self, message: str, pattern: str) -> None:
        super().__init__(message)
        self.pattern = pattern


def parse_pattern_list(value: PatternList) -> tuple[str, ...]:
    """Normalise a pattern list the way Kafka parses a LIST property.

    A string is trimmed and split on commas with surrounding whitespace; an empty string is an
    empty list. Empty entries (``a,,b``, ``a,``) are rejected, as Kafka 4 does.
    """
    if isinstance(value, str):
        trimmed = value.strip()
        entries: Sequence[object] = _LIST_SPLIT.split(trimmed) if trimmed else []
    elif isinstance(value, Sequence):
        entries = value
    else:
        raise FilterPatternError(
            f"a pattern list must be a list or a comma-separated string, got {value!r}", repr(value)
        )
    for entry in entries:
        if not isinstance(entry, str):
            raise FilterPatternError(f"pattern {entry!r} is not a string", repr(entry))
        if entry == "":
            raise FilterPatternError(f"pattern list {value!r} has an empty entry", str(value))
    return tuple(entries)  # type: ignore[arg-type]


def compile_pattern_list(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One regex matching any entry (``|``-joined, as MM2 does), or None for an empty list."""
    for pattern in patterns:
        _compile(_join_like_java([pattern]), pattern)
    return _compile(_join_like_java(patterns), ", ".join(patterns)) if patterns else None


def _join_like_java(patterns: Sequence[str]) -> str:
    """``|``-join entries, turning a leading ``(?flags)`` into a Python scoped group.

    Java applies such flags to the rest of the enclosing group, that is to this entry and every
    later one; Python accepts global flags only at the very start, so the rest is wrapped instead.
    """
    for index, pattern in enumerate(patterns):
        flags = _LEADING_FLAGS.match(pattern)
        if flags and (flags.group(1) or flags.group(2)):
            on, off = flags.group(1), flags.group(2) or ""
            unsupported = set(on + off) - set(_PYTHON_SCOPED_FLAGS)
            if unsupported:
                raise FilterPatternError(
                    f"invalid regular expression {pattern!r}: Java flag(s) {''.join(sorted(unsupported))} "
                    f"are not supported; use only {_PYTHON_SCOPED_FLAGS}", pattern
                )
            rest = _join_like_java([pattern[flags.end():], *patterns[index + 1:]])
            scoped = f"(?{on}{'-' + off if off else ''}:{rest})"
            return "|".join([*patterns[:index], scoped])
    return "|".join(patterns)


def _compile(expression: str, shown: str) -> re.Pattern[str]:
    try:
        return re.compile(expression, re.ASCII)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise FilterPatternError(f"invalid regular expression {shown!r}: {exc.msg}{where}", shown) from None


def _full_match(compiled: re.Pattern[str] | None, name: str) -> bool:
    return compiled is not None and compiled.fullmatch(name) is not None


@dataclass(frozen=True)
class _IncludeExclude:
    """Shared core: ``include`` and ``exclude`` lists, normalised to tuples and compiled once."""

    include: PatternList
    exclude: PatternList
    _include_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _exclude_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        include = parse_pattern_list(self.include)
        exclude = parse_pattern_list(self.exclude)
        object.__setattr__(self, "include", include)
        object.__setattr__(self, "exclude", exclude)
        object.__setattr__(self, "_include_re", compile_pattern_list(include))
        object.__setattr__(self, "_exclude_re", compile_pattern_list(exclude))

    def _accepts(self, name: str) -> bool:
        return _full_match(self._include_re, name) and not _full_match(self._exclude_re, name)


@dataclass(frozen=True)
class TopicFilter(_IncludeExclude):
    """MM2's ``topics`` / ``topics.exclude``: which topic names a flow replicates.

    Policy-internal topics and cycles are excluded separately, by
    :func:`strait.policy.should_replicate_topic`.
    """

    include: PatternList = TOPICS_INCLUDE_DEFAULT
    exclude: PatternList = TOPICS_EXCLUDE_DEFAULT

    def should_replicate_topic(self, topic: str) -> bool:
        """True when the topic matches an include pattern and no exclude pattern."""
        return self._accepts(topic)


@dataclass(frozen=True)
class GroupFilter(_IncludeExclude):
    """MM2's ``groups`` / ``groups.exclude``: which consumer groups get checkpoints."""

    include: PatternList = GROUPS_INCLUDE_DEFAULT
    exclude: PatternList = GROUPS_EXCLUDE_DEFAULT

    def should_replicate_group(self, group: str) -> bool:
        """True when the group matches an include pattern and no exclude pattern."""
        return self._accepts(group)


@dataclass(frozen=True)
class ConfigPropertyFilter:
    """MM2's ``config.properties.exclude`` and ``use.defaults.from`` for topic-config sync.

    Only the name-based part of MM2's rule lives here; read-only, sensitive and static-broker
    entries are skipped by the config sync itself.
    """

    exclude: PatternList = CONFIG_PROPERTIES_EXCLUDE_DEFAULT
    use_defaults_from: str = "target"
    _exclude_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exclude = parse_pattern_list(self.exclude)
        object.__setattr__(self, "exclude", exclude)
        object.__setattr__(self, "_exclude_re", compile_pattern_list(exclude))
        if self.use_defaults_from not in USE_DEFAULTS_FROM_VALUES:
            raise ConfigError(
                f"use.defaults.from must be 'target' or 'source', got {self.use_defaults_from!r}"
            )

    def should_replicate_config_property(self, name: str) -> bool:
        """True unless the property name fully matches an exclude pattern."""
        return not _full_match(self._exclude_re, name)

    def should_replicate_source_default(self, name: str) -> bool:
        """True when a source-side default value is set explicitly on the target (``source`` mode).

        With ``target`` (MM2's default) such a property is deleted on the target instead, so the
        target's own default applies.
        """
        return self.use_defaults_from == "source"
