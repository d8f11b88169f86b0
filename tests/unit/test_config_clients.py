"""Client settings between Java (MM2 files, the Spark Kafka source) and librdkafka spellings."""

from __future__ import annotations

import pytest

from strait.config.clients import jaas_options, java_settings, librdkafka_settings
from strait.errors import ConfigError

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_librdkafka_sasl_ssl_becomes_java_jaas_and_pem_truststore() -> None:
    settings = {
        "bootstrap.servers": "a:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "repl", "sasl.password": "s3cret", "ssl.ca.location": "/etc/strait/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "fetch.min.bytes": "1",
    }
    assert java_settings(settings) == {
        "bootstrap.servers": "a:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_MODULE} required username="repl" password="s3cret";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/strait/ca.pem",
        "ssl.endpoint.identification.algorithm": "", "fetch.min.bytes": "1",
    }


@pytest.mark.parametrize("password", ['p"w', "back\\slash", 'both\\"; x=y', "plain"])
def test_jaas_escaping_round_trips_any_password(password: str) -> None:
    java = java_settings({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": password})
    module, options = jaas_options(java["sasl.jaas.config"])
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "u", "password": password}
    jaas = java.pop("sasl.jaas.config")
    back = librdkafka_settings(java, jaas)
    assert back["sasl.password"] == password


def test_java_settings_pass_through_and_win() -> None:
    jaas = f'{SCRAM_MODULE} required username="a" password="b";'
    truststore = {"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    settings = {"sasl.jaas.config": jaas, "sasl.username": "ignored", "sasl.password": "ignored",
                "ssl.ca.location": "/other.pem", "sasl.mechanism": "SCRAM-SHA-512", **truststore}
    expected = {"sasl.jaas.config": jaas, "sasl.mechanism": "SCRAM-SHA-512", **truststore}
    assert java_settings(settings) == expected


def test_pem_keystores_and_inline_certificates() -> None:
    assert java_settings({"ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.pem",
                          "ssl.key.password": "k", "ssl.ca.pem": "-----CA-----"}) == {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/c.pem", "ssl.key.password": "k",
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----CA-----",
    }
    assert java_settings({"ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY"}) == {
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CERT", "ssl.keystore.key": "KEY",
    }


@pytest.mark.parametrize(("settings", "problem"), [
    ({"sasl.mechanism": "GSSAPI", "sasl.username": "u"}, "PLAIN and SCRAM only"),
    ({"sasl.username": "u", "sasl.password": "p"}, "PLAIN and SCRAM only"),
    ({"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"}, "one PEM file"),
])
def test_untranslatable_settings_say_what_to_do(settings: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        java_settings(settings)


def test_librdkafka_mechanisms_alias_and_https_algorithm() -> None:
    java = java_settings({"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": "p",
                          "ssl.endpoint.identification.algorithm": "https"})
    assert java["sasl.mechanism"] == "SCRAM-SHA-256" and "sasl.mechanisms" not in java
    assert java["ssl.endpoint.identification.algorithm"] == "https"


def test_java_sasl_ssl_settings_as_mm2_users_write_them_reach_librdkafka() -> None:
    jaas = f'{SCRAM_MODULE} required username="strait" password="pw";'
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.truststore.type": "PEM", "ssl.truststore.location": "/lab/ca.pem"}
    assert librdkafka_settings(settings, jaas) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "strait",
        "sasl.password": "pw", "ssl.ca.location": "/lab/ca.pem",
    }
