"""The MM2 oracle: one long-running JVM answering requests with MirrorMaker 2's classes (Mm2Oracle.java)."""

from __future__ import annotations

import queue
import subprocess
import threading
from pathlib import Path

ORACLE_SOURCE = Path(__file__).resolve().with_name("Mm2Oracle.java")
ORACLE_LOG_CONFIG = ORACLE_SOURCE.with_name("log4j2.properties")
ORACLE_MAIN = "org.apache.kafka.connect.mirror.Mm2Oracle"
ANSWER_TIMEOUT = 120.0
TRANSLATE_TIMEOUT_MS = "30000"


def text_token(value: str | None) -> str:
    """A string as one request token: ``x`` + its UTF-8 bytes in hex, ``-`` for null."""
    return "-" if value is None else "x" + value.encode("utf-8").hex()


def bytes_token(value: bytes) -> str:
    """Bytes as one request token."""
    return "x" + value.hex()


def token_text(token: str) -> str | None:
    """The string of an answer token (None for ``-``)."""
    return None if token == "-" else bytes.fromhex(token[1:]).decode("utf-8")


def token_bytes(token: str) -> bytes:
    """The bytes of an answer token."""
    return bytes.fromhex(token[1:])


def offsets_by_partition(
    answer: list[str], with_group: bool
) -> dict[tuple[str | None, ...], tuple[int, str | None]]:
    """An answer of (group,) topic, partition, offset, metadata rows, by (group,) topic and partition."""
    width = 5 if with_group else 4
    assert len(answer) % width == 0, answer
    result: dict[tuple[str | None, ...], tuple[int, str | None]] = {}
    for i in range(0, len(answer), width):
        row = answer[i : i + width]
        *names, partition, offset, metadata = row
        result[(*[token_text(n) for n in names], partition)] = (int(offset), token_text(metadata))
    return result


class JavaRejected(Exception):
    """The oracle answered ERR: the MM2 class threw."""


class Mm2Oracle:
    """One long-running JVM answering requests with MM2's classes."""

    def __init__(self, classpath: str, log_path: Path) -> None:
        self._log_path = log_path
        self._log = log_path.open("wb")
        self._proc = subprocess.Popen(
            ["java", f"-Dlog4j2.configurationFile={ORACLE_LOG_CONFIG}", "-cp", classpath, ORACLE_MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            encoding="utf-8",
        )
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._answers.put(line.rstrip("\n"))
        self._answers.put(None)

    def ask(self, *tokens: str) -> list[str]:
        """Send one request; the answer's tokens, or JavaRejected with Java's exception."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(" ".join(tokens) + "\n")
        self._proc.stdin.flush()
        try:
            answer = self._answers.get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            raise AssertionError(
                f"MM2 oracle gave no answer in {ANSWER_TIMEOUT}s; log: {self._log_path}"
            ) from None
        if answer is None:
            raise AssertionError(f"MM2 oracle exited: {self._log_path.read_text()[-2000:]}")
        status, _, rest = answer.partition(" ")
        if status == "ERR":
            raise JavaRejected(rest)
        assert status == "OK", answer
        return rest.split(" ") if rest else []

    def close(self) -> None:
        """Stop the JVM (end of input makes it exit)."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()
