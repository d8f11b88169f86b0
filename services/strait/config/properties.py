"""Java ``.properties`` syntax, as ``java.util.Properties.load`` reads it.

Used for MirrorMaker 2 files and for the properties files that ``${file:/path:key}`` secret
references point into. Values are also trimmed, as Kafka's ``ConfigDef`` trims every value it parses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strait.errors import ConfigError

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class Property:
    """One ``key=value`` entry and the (1-based) line its logical line starts on."""

    key: str
    value: str
    line: int


def scalar_text(value: Any) -> str:
    """A YAML or JSON scalar as a properties value (``true``/``false``; null is empty)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def escaped_line(line: str) -> str:
    """One ``key = value`` line with the value as Properties.load reads it back (backslashes and line
    breaks kept: a PEM certificate is one value)."""
    key, _, value = line.partition(" = ")
    return f"{key} = " + value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def read_properties_file(path: Path) -> list[Property]:
    """Parse a properties file; errors name the file and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # what Properties.load(InputStream) assumes
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}:{exc}") from None


def parse_properties(text: str) -> list[Property]:
    """Parse properties text into entries in file order (a repeated key appears twice)."""
    return [_split_entry(logical, line) for logical, line in _logical_lines(text)]


def _logical_lines(text: str) -> list[tuple[str, int]]:
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    result: list[tuple[str, int]] = []
    index = 0
    while index < len(natural):
        start = index
        line = natural[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and index < len(natural):
            line = line[:-1] + natural[index].lstrip(_WHITESPACE)
            index += 1
        if _continues(line):
            line = line[:-1]
        result.append((line, start + 1))
    return result


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(line: str, number: int) -> Property:
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in _SEPARATORS or char in _WHITESPACE:
            break
        position += 1
    key_text = line[:position]
    rest = line[position:].lstrip(_WHITESPACE)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return Property(_unescape(key_text, number), _unescape(rest, number).strip(), number)


def _unescape(text: str, number: int) -> str:
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char != "\\" or position + 1 >= len(text):
            out.append(char)
            position += 1
            continue
        escaped = text[position + 1]
        if escaped == "u":
            digits = text[position + 2:position + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                # The text is not echoed: it may be part of a password.
                raise ConfigError(f"{number}: malformed \\uxxxx escape (\\u needs four hex digits)")
            out.append(chr(int(digits, 16)))
            position += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        position += 2
    return "".join(out)
