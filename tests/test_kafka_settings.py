"""Kafka client settings pass through from a properties file and --kafka-option, for both clients."""
import pytest

from producers.kafka import KafkaSettings


def test_properties_file_and_options_merge(tmp_path):
    conf = tmp_path / "client.properties"
    conf.write_text("# SASL over TLS\nsecurity.protocol=SASL_SSL\nsasl.mechanism = PLAIN\n"
                    "sasl.username=alice\n! another comment\nssl.ca.location=/etc/ca.pem\n")
    s = KafkaSettings.from_args("k1:9093,k2:9093", str(conf), ["sasl.username=bob", "sasl.password=secret"])
    assert s.confluent()["security.protocol"] == "SASL_SSL"
    assert s.confluent()["sasl.username"] == "bob" and s.confluent()["bootstrap.servers"] == "k1:9093,k2:9093"
    kp = s.kafka_python()
    assert kp == {"bootstrap_servers": ["k1:9093", "k2:9093"], "security_protocol": "SASL_SSL",
                  "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob", "sasl_plain_password": "secret",
                  "ssl_cafile": "/etc/ca.pem"}


def test_malformed_settings_are_reported(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol\n")
    with pytest.raises(ValueError, match="bad.properties:1: expected key=value"):
        KafkaSettings.from_args("k:1", str(bad))
    with pytest.raises(ValueError, match="key=value"):
        KafkaSettings.from_args("k:1", None, ["=x"])
    with pytest.raises(ValueError, match="no kafka-python equivalent"):
        KafkaSettings("k:1", {"queue.buffering.max.kbytes": "1"}).kafka_python()
