"""Client settings of MM2 files (Java spellings) as librdkafka takes them."""

from __future__ import annotations

import pytest

from strait.config.clients import jaas_options, librdkafka_settings
from strait.errors import ConfigError

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.mark.parametrize("password", ['p"w', "back\\slash", 'both\\"; x=y', "plain"])
def test_jaas_escaping_round_trips_any_password(password: str) -> None:
    escaped = password.replace("\\", "\\\\").replace('"', '\\"')
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{escaped}";'
    module, options = jaas_options(jaas)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options == {"username": "u", "password": password}
    assert librdkafka_settings({"sasl.mechanism": "PLAIN"}, jaas)["sasl.password"] == password


def test_java_sasl_ssl_settings_as_mm2_users_write_them_reach_librdkafka() -> None:
    jaas = f'{SCRAM_MODULE} required username="strait" password="pw";'
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.truststore.type": "PEM", "ssl.truststore.location": "/lab/ca.pem"}
    assert librdkafka_settings(settings, jaas) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "strait",
        "sasl.password": "pw", "ssl.ca.location": "/lab/ca.pem",
    }


def test_javas_delivery_timeout_takes_librdkafkas_name_and_two_values_are_refused() -> None:
    assert librdkafka_settings({"delivery.timeout.ms": "120000"}) == {"message.timeout.ms": "120000"}
    assert librdkafka_settings({"delivery.timeout.ms": "60000", "message.timeout.ms": "60000"}) == \
        {"message.timeout.ms": "60000"}
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms=60000 and message.timeout.ms=30000 name one setting"):
        librdkafka_settings({"delivery.timeout.ms": "60000", "message.timeout.ms": "30000"})
