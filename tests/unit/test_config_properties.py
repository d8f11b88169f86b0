"""Java .properties syntax as java.util.Properties.load reads it (plus Kafka's value trimming)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strait.config.properties import parse_properties, read_properties_file
from strait.errors import ConfigError


def _pairs(text: str) -> dict[str, str]:
    return {entry.key: entry.value for entry in parse_properties(text)}


@pytest.mark.parametrize("line", ["a=b", "a = b", "a:b", "a : b", "a b", "  a\t=\tb  ", "a\f b", "a    b"])
def test_every_separator_form(line: str) -> None:
    assert _pairs(line) == {"a": "b"}


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# hash comment\n! bang comment\n   # indented comment\n\n\t\nkey=value\n"
    assert _pairs(text) == {"key": "value"}


def test_only_the_first_separator_splits() -> None:
    assert _pairs("url = redis://h:1/0\nratio=a=b\nk: v: w") == {"url": "redis://h:1/0", "ratio": "a=b", "k": "v: w"}


def test_continuation_lines_join_without_leading_whitespace() -> None:
    text = "topics = a, \\\n      b, \\\n\tc\nnext = 1\n"
    assert _pairs(text) == {"topics": "a, b, c", "next": "1"}


def test_a_continued_line_starting_with_hash_is_not_a_comment() -> None:
    assert _pairs("k = a\\\n  #b") == {"k": "a#b"}


def test_an_even_number_of_trailing_backslashes_does_not_continue() -> None:
    assert _pairs("k = a\\\\\nnext = 1") == {"k": "a\\", "next": "1"}


def test_a_trailing_backslash_at_the_end_of_the_file_is_dropped() -> None:
    assert _pairs("k = a\\") == {"k": "a"}


def test_escapes_in_keys_and_values() -> None:
    text = r"a\=b\:c\ d = x\ty\nz\u00e9\\w\q"
    assert _pairs(text) == {"a=b:c d": "x\ty\nz\u00e9\\wq"}


def test_regex_backslashes_need_doubling_as_in_mm2_files() -> None:
    assert _pairs(r"topics = orders\\..*") == {"topics": r"orders\..*"}


def test_line_endings_of_every_kind() -> None:
    assert _pairs("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}


def test_key_without_value_and_value_trimming() -> None:
    assert _pairs("empty\nalso.empty =   \nspaced = v   ") == {"empty": "", "also.empty": "", "spaced": "v"}


def test_entries_keep_their_starting_line_and_repeats() -> None:
    entries = parse_properties("# c\na = 1\nb = x\\\n y\na = 2\n")
    assert [(e.key, e.value, e.line) for e in entries] == [("a", "1", 2), ("b", "xy", 3), ("a", "2", 5)]


def test_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"^2: malformed \\uxxxx"):
        parse_properties("ok=1\nbad=\\u12g4")


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("a=1\nb=\\uZZZZ\n")
    with pytest.raises(ConfigError, match=r"bad\.properties:2: malformed"):
        read_properties_file(path)
    with pytest.raises(ConfigError, match="missing.properties: cannot read"):
        read_properties_file(tmp_path / "missing.properties")


def test_latin1_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "latin.properties"
    path.write_bytes("name=caf\xe9\n".encode("latin-1"))
    assert read_properties_file(path)[0].value == "caf\u00e9"
