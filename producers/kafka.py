"""Kafka plumbing shared by the producer scripts: settings, topics, and two publishing clients.

confluent-kafka is the default client; kafka-python is the pure-Python alternative. Both get the
same settings: librdkafka-style keys (security.protocol, sasl.mechanism, ssl.ca.location, ...)
from a properties file or `--kafka-option key=value`, translated for kafka-python.
"""
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from streaming.wire.topics import OUTBOUND_TOPIC, PROTOCOL_HEADER, REJECTED_TOPIC, TOPICS  # noqa: F401  (re-exported)
from streaming.wire.topics import acl_refused

__all__ = ["AUTHORIZATION_FAILED", "check_reachable", "CLIENTS", "ConfluentPublisher", "DELIVERY_TIMEOUT_MS",
           "ensure_topics", "KafkaAclError", "KafkaPythonPublisher", "KafkaSecurityError", "KafkaSettings",
           "KafkaUnavailable", "OUTBOUND_TOPIC", "PROTOCOL_HEADER", "Publisher", "publisher", "REACH_TIMEOUT_S",
           "read_properties", "refused", "REJECTED_TOPIC", "security_refusal", "TOPICS"]
REACH_TIMEOUT_S = 5.0
# librdkafka retries a record until this long after it was produced: a broker restart or a short
# outage is waited out; what is still unconfirmed then is reported by Publisher.close().
DELIVERY_TIMEOUT_MS = 120_000

# librdkafka property -> kafka-python keyword
_KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password", "client.id": "client_id", "linger.ms": "linger_ms",
    "acks": "acks", "compression.type": "compression_type", "request.timeout.ms": "request_timeout_ms",
}


class KafkaUnavailable(RuntimeError):
    """The broker could not be reached or refused the request; the message says which and why."""


class KafkaSecurityError(KafkaUnavailable):
    """The broker answered but refused this client's security settings: retrying cannot help."""


class KafkaAclError(KafkaSecurityError):
    """The broker's authorizer refused an operation: an ACL is missing (the message names it)."""


# librdkafka's codes of TOPIC_, GROUP_ and CLUSTER_AUTHORIZATION_FAILED
AUTHORIZATION_FAILED = {29: "topic", 30: "group", 31: "cluster"}


@dataclass
class KafkaSettings:
    bootstrap: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_args(cls, bootstrap: str, config_file: str | None = None, options: list[str] | None = None):
        try:
            merged = read_properties(config_file) if config_file else {}
        except OSError as exc:
            raise ValueError(f"cannot read --kafka-config {config_file}: {exc.strerror or exc}") from None
        for item in options or []:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--kafka-option must be key=value, got {item!r}")
            merged[key.strip()] = value.strip()
        return cls(bootstrap, merged)

    def confluent(self, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.options, **extra}

    def kafka_python(self, **extra) -> dict:
        conf = {"bootstrap_servers": self.bootstrap.split(",")}
        for key, value in self.options.items():
            name = _KAFKA_PYTHON_NAMES.get(key)
            if name is None:
                raise ValueError(f"Kafka option {key!r} has no kafka-python equivalent; use --client confluent")
            conf[name] = int(value) if name in ("linger_ms", "request_timeout_ms") else value
        conf.update(extra)
        return conf


def refused(settings: KafkaSettings, operation: str, resource: str, name: str, note: str = "") -> KafkaAclError:
    """The error naming the ACL the authorizer refused to the user of these settings."""
    return KafkaAclError(acl_refused(settings.options.get("sasl.username"), operation, resource, name, note))


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file: key=value lines, # or ! comments."""
    out = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------------------- admin
def check_reachable(settings: KafkaSettings, timeout: float = REACH_TIMEOUT_S) -> None:
    """Kafka answers a metadata request with these settings; KafkaSecurityError at the first sign
    that it refuses them (credentials, TLS trust, security protocol), KafkaUnavailable otherwise."""
    from confluent_kafka import KafkaException
    refused = _refusing(settings.bootstrap)
    if refused:
        raise KafkaUnavailable(f"cannot reach Kafka at {settings.bootstrap}: {refused}")
    from confluent_kafka.admin import AdminClient
    heard = _Heard()
    # what librdkafka reports goes to `heard`, not to the console: the error below says it once, clearly
    admin = AdminClient(settings.confluent(**{"error_cb": heard.error, "logger": heard.logger, "log_level": 6}))
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            last = exc.args[0].str() if exc.args else str(exc)
        admin.poll(0.2)                                  # serves the error and log callbacks
        for refusal in filter(None, (security_refusal(settings, code, text) for code, text in heard.items)):
            raise KafkaSecurityError(f"Kafka at {settings.bootstrap} {refusal}")
        if _closed_at_first_request(settings, heard.items):
            raise KafkaSecurityError(
                f"Kafka at {settings.bootstrap} closes every connection at its first request: the listener expects "
                f"TLS, not {settings.options.get('security.protocol', 'PLAINTEXT')!r} (SSL or SASL_SSL?); set "
                f"security.protocol in --kafka-config/--kafka-option")
        if time.monotonic() >= deadline:
            raise KafkaUnavailable(f"cannot reach Kafka at {settings.bootstrap} within {timeout:.0f} s: {last}")


class _Heard:
    """librdkafka's errors and log lines of one client, as (error code or None, text)."""

    def __init__(self):
        self.items: list[tuple[int | None, str]] = []
        self.logger = logging.getLogger(f"dirstream.kafka-check.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(_ListHandler(self.items))

    def error(self, error) -> None:
        self.items.append((error.code(), error.str()))


class _ListHandler(logging.Handler):
    def __init__(self, items: list):
        super().__init__()
        self.items = items

    def emit(self, record: logging.LogRecord) -> None:
        self.items.append((None, record.getMessage()))


def security_refusal(settings: KafkaSettings, code: int | None, text: str) -> str | None:
    """Why the broker refused this client's security settings (a librdkafka error or log line), in
    one line that names the setting to check and never a secret; None when it is not about security."""
    from confluent_kafka import KafkaError
    options, where = settings.options, "in --kafka-config/--kafka-option"
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return (f"refused the credentials of user {options.get('sasl.username', '(none)')!r} "
                f"({options.get('sasl.mechanism') or options.get('sasl.mechanisms') or 'SASL'}): a wrong password "
                f"or an unknown user; check sasl.username and sasl.password {where}")
    if code == KafkaError._SSL or "SSL handshake failed" in text:
        if "certificate verify failed" in text:
            return (f"presented a TLS certificate that the CA in ssl.ca.location "
                    f"({options.get('ssl.ca.location', 'the system CAs')}) does not sign; check ssl.ca.location {where}")
        return f"failed the TLS handshake ({_first_clause(text)}); check the ssl.* settings {where}"
    if "security.protocol" in text:              # librdkafka's hint on a connection closed at ApiVersion
        return (f"closed the connection during the handshake: the listener expects another security.protocol "
                f"than {options.get('security.protocol', 'PLAINTEXT')!r} (a TLS or SASL listener?); set "
                f"security.protocol {where}")
    return None


def _closed_at_first_request(settings: KafkaSettings, heard: list, at_least: int = 3) -> bool:
    """A client without TLS whose connections the broker keeps closing as soon as it sends its
    first request (ApiVersion): what a TLS listener does with plaintext (librdkafka 2.x logs no hint)."""
    if settings.options.get("security.protocol", "PLAINTEXT").upper() not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return False
    return sum("connection closed by peer" in text and "APIVERSION_QUERY" in text for _, text in heard) >= at_least


def _first_clause(text: str) -> str:
    return text.split(": ", 1)[-1].split(" (after")[0][:200]


def _refusing(bootstrap: str) -> str | None:
    """A reason if every bootstrap address refuses TCP connections outright (no need to wait)."""
    import socket
    reasons = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
                return None
        except ConnectionRefusedError:
            reasons.append(f"{address.strip()} refused the connection")
        except (OSError, ValueError):
            return None                  # unresolvable or slow: let the client try with its own timeout
    return "; ".join(reasons)


def ensure_topics(settings: KafkaSettings, topics: dict[str, int], need: str = "Describe") -> list[str]:
    """Create the topics that are missing, with the given partition counts; returns those created.
    need: the ACL the caller needs on them (Read, Write), named when the authorizer hides a topic."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    check_reachable(settings)
    admin = AdminClient(settings.confluent())
    existing = admin.list_topics(timeout=REACH_TIMEOUT_S).topics
    missing = [NewTopic(t, partitions, 1) for t, partitions in topics.items() if t not in existing]
    created, hidden = [], []
    for topic, future in (admin.create_topics(missing) if missing else {}).items():
        try:
            future.result(timeout=10)
            created.append(topic)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:   # not seen: missing, or hidden from this user
                raise refused(settings, need, "topic", topic, " (or Create on it, if it does not exist yet)") from None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                hidden.append(topic)
            else:
                raise KafkaUnavailable(f"cannot create topic {topic}: {exc}") from None
    _wait_for_metadata(admin, created)
    _check_visible(settings, admin, hidden, need)
    return created


def _check_visible(settings: KafkaSettings, admin, topics: list[str], need: str) -> None:
    """Topics that exist but were not listed: created meanwhile by another client, or hidden by the
    authorizer from a user without Describe (which Read and Write include)."""
    if topics:
        listed = admin.list_topics(timeout=REACH_TIMEOUT_S).topics
        for topic in topics:
            if topic not in listed:
                raise refused(settings, need, "topic", topic)


def _wait_for_metadata(admin, topics: list[str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while topics and time.monotonic() < deadline:
        if all(t in admin.list_topics(timeout=REACH_TIMEOUT_S).topics for t in topics):
            return
        time.sleep(0.1)


# ---------------------------------------------------------------------------- publishing
class Publisher:
    """Sends records and counts confirmed deliveries; close() flushes and reports failures."""

    def __init__(self, settings: KafkaSettings):
        self.sent = 0
        self.delivered = 0
        self.failures: list[str] = []
        self.settings = settings
        self.refused_topic: str | None = None      # a topic the authorizer does not let us write to
        self.refusal: KafkaAclError | None = None

    def _on_result(self, error, topic: str | None = None) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failures.append(str(error))
        if topic and _topic_refused(error):
            self.refused_topic = topic

    def _check_refused(self) -> None:
        """Every record would fail alike: stop at the first one with the ACL to grant. A refusal
        already raised is raised again: close() in a `finally` then names the ACL too, not the
        records it left unconfirmed."""
        if self.refusal is not None:
            raise self.refusal
        if self.refused_topic is not None:
            self.refusal = refused(self.settings, "Write", "topic", self.refused_topic)
            raise self.refusal

    def send(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        raise NotImplementedError

    def flush(self, timeout: float = 60.0) -> None:
        raise NotImplementedError

    def close(self, timeout: float = DELIVERY_TIMEOUT_MS / 1000 + 10) -> None:
        self.flush(timeout)
        self._check_refused()
        undelivered = self.sent - self.delivered - len(self.failures)
        if self.failures or undelivered:
            raise KafkaUnavailable(f"{len(self.failures)} records failed and {undelivered} were not confirmed "
                                   f"of {self.sent} sent" + (f"; first error: {self.failures[0]}" if self.failures else ""))


def _client_logger() -> logging.Logger:
    """librdkafka's log lines, on stderr as without a logger, but for the authorizer's refusals: the
    publisher reports those itself, in one line that names the ACL."""
    logger = logging.getLogger("dirstream.kafka.client")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.addFilter(lambda record: "authorization failed" not in record.getMessage().lower())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def _topic_refused(error) -> bool:
    """A delivery error of the authorizer's (confluent's KafkaError or kafka-python's exception)."""
    code = error.code() if hasattr(error, "code") and callable(error.code) else None
    return AUTHORIZATION_FAILED.get(code) == "topic" or type(error).__name__ == "TopicAuthorizationFailedError"


class ConfluentPublisher(Publisher):
    def __init__(self, settings: KafkaSettings):
        super().__init__(settings)
        from confluent_kafka import Producer
        # idempotent: a record retried across a broker restart is written once, in order
        conf = {"linger.ms": 20, "message.timeout.ms": DELIVERY_TIMEOUT_MS, "enable.idempotence": True}
        conf.update(settings.confluent())              # the user's settings win (a longer message.timeout.ms)
        self.delivery_timeout_s = int(conf["message.timeout.ms"]) / 1000
        self.producer = Producer({"logger": _client_logger(), **conf})
        self.topic = "(none yet)"

    def send(self, topic, key, value, headers):
        self.topic = topic
        with self._refusals():
            while True:
                try:
                    self.producer.produce(topic, value=value, key=key, headers=headers,
                                          on_delivery=lambda err, msg: self._on_result(err, msg.topic()))
                    break
                except BufferError:                          # local queue full: let deliveries drain
                    self.producer.poll(0.1)
            self.sent += 1
            self.producer.poll(0)
        self._check_refused()

    def flush(self, timeout=60.0):
        with self._refusals():
            self.producer.flush(timeout)
        self._check_refused()

    @contextmanager
    def _refusals(self):
        """An idempotent producer allowed to write to no topic is refused its producer id (a fatal
        CLUSTER_AUTHORIZATION_FAILED): Write on the topic is what it lacks (or IdempotentWrite)."""
        from confluent_kafka import KafkaError, KafkaException
        try:
            yield
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and error.code() == KafkaError._FATAL:
                error = self._fatal_error() or error      # produce() saw the state before poll() its cause
            if error is not None and error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                self.refusal = refused(self.settings, "Write", "topic", self.topic,
                                       " (or IdempotentWrite on the cluster)")
                raise self.refusal from None
            raise

    def _fatal_error(self):
        """The fatal error that stopped the producer: poll() raises it once."""
        from confluent_kafka import KafkaException
        try:
            self.producer.poll(0)
        except KafkaException as exc:
            return exc.args[0] if exc.args else None
        return None

    def close(self, timeout: float | None = None) -> None:
        super().close(self.delivery_timeout_s + 10 if timeout is None else timeout)


class KafkaPythonPublisher(Publisher):
    def __init__(self, settings: KafkaSettings):
        super().__init__(settings)
        from kafka import KafkaProducer
        from kafka.errors import KafkaError
        try:
            # the same guarantees as the confluent client: idempotent (a record retried across a broker
            # restart is written once, in order), each record retried for up to DELIVERY_TIMEOUT_MS
            self.producer = KafkaProducer(**settings.kafka_python(
                linger_ms=20, request_timeout_ms=30_000, enable_idempotence=True, acks="all",
                delivery_timeout_ms=DELIVERY_TIMEOUT_MS))
        except KafkaError as exc:
            raise KafkaUnavailable(f"cannot reach Kafka at {settings.bootstrap}: {exc}") from None

    def send(self, topic, key, value, headers):
        future = self.producer.send(topic, value=value, key=key, headers=headers)
        future.add_callback(lambda _md: self._on_result(None))
        future.add_errback(lambda exc: self._on_result(exc, topic))
        self.sent += 1
        self._check_refused()

    def flush(self, timeout=60.0):
        self.producer.flush(timeout)

    def close(self, timeout=DELIVERY_TIMEOUT_MS / 1000 + 10):
        try:
            super().close(timeout)
        finally:
            self.producer.close(timeout)


CLIENTS = {"confluent": ConfluentPublisher, "kafka-python": KafkaPythonPublisher}


def publisher(client: str, settings: KafkaSettings) -> Publisher:
    check_reachable(settings)
    return CLIENTS[client](settings)
