"""`strait config apply|show` end to end on a real Redis: output, errors, and no password anywhere."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from strait.config import config_to_dict, load_yaml
from strait_lab.redis import RedisServer

DATA = Path(__file__).parents[1] / "data" / "config"
INLINE_PASSWORDS = ("Inline-Jaas-Pw-4711", "Inline-Librdkafka-Pw-0815", "Inline-Key-Pw-2342")
ENV_PASSWORDS = {"STRAIT_TEST_A_SCRAM_PASSWORD": "Env-Jaas-Pw-1357", "STRAIT_TEST_B_SCRAM_PASSWORD": "Env-B-Pw-2468"}


def _run(argv: list[str]) -> int:
    """Run `strait` in this process, so that caplog sees its logs."""
    from strait import cli

    return cli.main(argv)


@pytest.fixture
def strait(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*argv: str) -> tuple[int, str, str]:
        code = _run(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def redis_contents(url: str) -> bytes:
    client = redis.Redis.from_url(url)
    chunks: list[bytes] = []
    for key in client.scan_iter():
        chunks.append(key)
        kind = client.type(key).decode()
        reader = {"string": lambda k: [client.get(k)], "hash": lambda k: [*client.hgetall(k).keys(),
                                                                            *client.hgetall(k).values()],
                  "list": lambda k: client.lrange(k, 0, -1), "set": lambda k: list(client.smembers(k)),
                  "zset": lambda k: client.zrange(k, 0, -1),
                  "stream": lambda k: [v for _, f in client.xrange(k) for kv in f.items() for v in kv]}[kind]
        chunks += [chunk or b"" for chunk in reader(key)]
    client.close()
    return b"\n".join(chunks)


def test_apply_then_show(strait: Callable[..., tuple[int, str, str]], redis_url: str) -> None:
    code, out, err = strait("config", "apply", str(DATA / "full.yaml"), "--redis-url", redis_url)
    assert code == 0, err
    assert "configuration stored as version 1" in out and "flows primary->backup, backup->primary (disabled), primary->dr" in out

    code, out, _ = strait("config", "show", "--redis-url", redis_url)
    assert code == 0
    assert out.startswith(f"# strait configuration version 1, applied from {DATA / 'full.yaml'} at ")
    assert "sasl.jaas.config" in out and "${env:PRIMARY_SCRAM_PASSWORD}" in out

    code, out, _ = strait("config", "show", "--redis-url", redis_url, "--json")
    shown = json.loads(out)
    assert shown["version"] == 1 and shown["config"] == config_to_dict(load_yaml(DATA / "full.yaml"))


def test_versions_and_the_redis_url_from_the_environment(
    strait: Callable[..., tuple[int, str, str]], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRAIT_REDIS_URL", redis_url)
    assert strait("config", "apply", str(DATA / "scram-env.yaml"))[0] == 0
    code, out, _ = strait("config", "apply", str(DATA / "scram-env.yaml"))
    assert code == 0 and "configuration unchanged, still version 1" in out
    code, out, _ = strait("config", "apply", str(DATA / "mm2-sample.properties"))
    assert code == 0 and "configuration stored as version 2" in out and "flows A->B, B->A" in out
    assert json.loads(strait("config", "show", "--json")[1])["version"] == 2
    old = json.loads(strait("config", "show", "--json", "--version", "1")[1])
    assert old["version"] == 1 and old["source"].endswith("scram-env.yaml")


def test_scram_passwords_never_appear_in_output_logs_or_redis(
    strait: Callable[..., tuple[int, str, str]], redis_url: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name, value in ENV_PASSWORDS.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    outputs: list[str] = []

    code, out, err = strait("config", "apply", "--dry-run", str(DATA / "mm2-scram-inline.properties"))
    outputs += [out, err]
    assert code == 0, err
    assert "******" in out and "is valid" in err and "not stored" in err
    assert "apply would refuse the inline secrets at A.sasl.jaas.config, B.sasl.password" in err

    code, out, err = strait("config", "apply", str(DATA / "mm2-scram-inline.properties"), "--redis-url", redis_url)
    outputs += [out, err]
    assert code == 1
    assert err.startswith("strait: error: ") and "refusing to store inline secrets" in err
    assert "A.sasl.jaas.config" in err and "B.sasl.password" in err and "B.producer.ssl.key.password" in err
    assert redis_contents(redis_url) == b""

    for argv in (["apply", str(DATA / "scram-env.yaml")], ["show"], ["show", "--json"]):
        code, out, err = strait("config", *argv, "--redis-url", redis_url)
        outputs += [out, err]
        assert code == 0, err

    from strait.config.store import load_stored_config

    _, stored = load_stored_config(redis.Redis.from_url(redis_url))
    resolved = stored.clusters["A"].librdkafka_config("consumer")  # the references do resolve
    assert resolved["sasl.password"] == ENV_PASSWORDS["STRAIT_TEST_A_SCRAM_PASSWORD"]

    everything = "\n".join([*outputs, caplog.text, redis_contents(redis_url).decode()])
    assert "loaded MM2 configuration" in caplog.text
    for password in (*INLINE_PASSWORDS, *ENV_PASSWORDS.values()):
        assert password not in everything


def test_redis_password_is_masked(
    strait: Callable[..., tuple[int, str, str]], redis_server_factory: Callable[..., RedisServer]
) -> None:
    server = redis_server_factory(password="Redis-Url-Pw-99")
    code, out, err = strait("config", "apply", str(DATA / "scram-env.yaml"), "--redis-url", server.url)
    assert code == 0, err
    assert "redis://:******@127.0.0.1" in out and "Redis-Url-Pw-99" not in out + err
    wrong = server.url.replace("Redis-Url-Pw-99", "Not-The-Pw-77")
    code, out, err = strait("config", "show", "--redis-url", wrong)
    assert code == 1 and err.startswith("strait: error: Redis at redis://127.0.0.1:")
    assert "Not-The-Pw-77" not in out + err


@pytest.mark.parametrize(("argv", "expected"), [
    (["apply", "/nonexistent/strait.yaml"], "/nonexistent/strait.yaml: cannot read"),
    (["show"], "no configuration is stored yet; store one with `strait config apply FILE`"),
    (["show", "--version", "9"], "there is no configuration version 9 (only the latest 50 versions are kept)"),
])
def test_errors_are_one_clear_line(
    strait: Callable[..., tuple[int, str, str]], redis_url: str, argv: list[str], expected: str
) -> None:
    code, out, err = strait("config", *argv, "--redis-url", redis_url)
    assert code == 1 and out == ""
    assert err.startswith(f"strait: error: {expected}") and err.count("\n") == 1


def test_invalid_file_names_file_and_key(strait: Callable[..., tuple[int, str, str]], tmp_path: Path,
                                          redis_url: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters:\n  A: {bootstrap_servers: a:1}\nflows:\n  - {source: A, target: B}\n")
    code, _, err = strait("config", "apply", str(bad), "--redis-url", redis_url)
    assert code == 1
    assert err == f"strait: error: {bad}: flows[0] (A->B): target cluster 'B' is not defined (clusters: A)\n"
    assert redis_contents(redis_url) == b""


def test_unreachable_redis(strait: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = strait("config", "show", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 1 and err.startswith("strait: error: Redis at redis://127.0.0.1:1/0 is unavailable")
    assert "--redis-url" in err


def test_console_script(redis_url: str) -> None:
    """The installed `strait` command: help, apply and show in child processes, logs on stderr included."""
    strait_bin = str(Path(sys.executable).parent / "strait")
    env = {**os.environ, "STRAIT_REDIS_URL": redis_url, "STRAIT_LOG_LEVEL": "DEBUG", **ENV_PASSWORDS}
    help_text = subprocess.run([strait_bin, "config", "--help"], capture_output=True, text=True, check=True).stdout
    assert "apply" in help_text and "show" in help_text

    dry = subprocess.run([strait_bin, "config", "apply", "--dry-run", str(DATA / "mm2-scram-inline.properties")],
                         env=env, capture_output=True, text=True, timeout=60)
    applied = subprocess.run([strait_bin, "config", "apply", str(DATA / "scram-env.yaml")],
                             env=env, capture_output=True, text=True, timeout=60)
    shown = subprocess.run([strait_bin, "config", "show", "--json"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert dry.returncode == applied.returncode == shown.returncode == 0, applied.stderr + shown.stderr
    assert json.loads(shown.stdout)["config"]["clusters"]["B"]["client"]["sasl.password"] == \
        "${env:STRAIT_TEST_B_SCRAM_PASSWORD}"
    everything = "".join(p.stdout + p.stderr for p in (dry, applied, shown))
    assert "loaded MM2 configuration" in everything and "document stored" in everything
    for password in (*INLINE_PASSWORDS, *ENV_PASSWORDS.values()):
        assert password not in everything


def test_flow_enable_disable_and_status_without_reapplying_the_file(
    strait: Callable[..., tuple[int, str, str]], redis_url: str,
) -> None:
    assert strait("config", "apply", str(DATA / "full.yaml"), "--redis-url", redis_url)[0] == 0

    code, out, err = strait("flow", "disable", "primary->dr", "--redis-url", redis_url)
    assert code == 0 and "flow primary->dr disabled: configuration version 2 (was 1)" in out, err
    assert "already disabled (configuration version 2)" in strait("flow", "disable", "primary->dr",
                                                                   "--redis-url", redis_url)[1]
    code, out, err = strait("flow", "enable", "backup->primary", "--redis-url", redis_url)
    assert code == 0 and "configuration version 3" in out, err

    shown = json.loads(strait("config", "show", "--json", "--redis-url", redis_url)[1])
    assert shown["source"] == "strait flow enable backup->primary"
    assert {f"{f['source']}->{f['target']}": f["enabled"] for f in shown["config"]["flows"]} == \
        {"primary->backup": True, "backup->primary": True, "primary->dr": False}
    before = load_yaml(DATA / "full.yaml")
    expected = [f.name for f in before.flows]
    assert [f"{f['source']}->{f['target']}" for f in shown["config"]["flows"]] == expected

    code, out, err = strait("flow", "status", "primary->dr", "--json", "--redis-url", redis_url)
    status = json.loads(out)
    assert code == 0 and status["enabled"] is False and status["version"] == 3
    assert set(status["held_by"]) >= {"configsync:primary->dr", "heartbeat:primary->dr"}
    assert not any(status["held_by"].values()), "nothing runs in this test"

    code, _, err = strait("flow", "enable", "primary->nowhere", "--redis-url", redis_url)
    assert code == 1 and "no flow 'primary->nowhere'; flows are primary->backup, backup->primary, primary->dr" in err
