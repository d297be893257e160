"""The decode stage: Kafka records -> envelope fields + a decoded-body summary, or a dead letter.

Runs in the Kafka source's reading tasks (source option decode=true). A record whose Avro envelope or protocol body does not
decode is marked ok=false with the error (structure, field, byte offset, reason) and keeps its
raw Kafka value; the good records of the same batch go on.
"""
import json

import fastavro
import pyarrow as pa

from ..wire.envelope import EnvelopeError, schema_text, unframe
from ..wire.rejected import RejectedPacket, decode_rejected
from ..wire.topics import PROTOCOL_OF_TOPIC, REJECTED_TOPIC
from ..wire import WireError, decode
from .columns import DECODED_COLUMNS, JOB_COLUMNS, SUMMARY_COLUMNS

__all__ = ["decode_batches", "DECODED_ARROW", "DECODED_FIELDS", "Decoder", "ENVELOPE_FIELDS", "FINDING",
           "JOB_ARROW", "job_batches", "JOB_CHUNK", "JOB_FIELDS", "PASS_ON", "REPLICA", "REQUEST", "state_key",
           "summarize", "summarize_records", "SUMMARY_ARROW", "SUMMARY_FIELDS", "TaskSummary", "UNKNOWN"]

_ARROW_TYPES = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "boolean": pa.bool_(),
                "binary": pa.binary(), "timestamp": pa.timestamp("us", tz="UTC")}
DECODED_FIELDS = [(name, _ARROW_TYPES[spark_type]) for name, spark_type in DECODED_COLUMNS]
DECODED_ARROW = pa.schema(DECODED_FIELDS)
ENVELOPE_FIELDS = ("message_id", "message_class", "sender_identifier_type", "sender_identifier",
                   "authentication_level", "hash_algorithm", "source_machine", "destination_machine",
                   "destination_queue", "sent_time", "arrival_time")


def _plain_schema(name: str = "envelope"):
    """A schema with logical types removed: timestamps stay int milliseconds (faster)."""
    raw = json.loads(schema_text(name))
    for f in raw["fields"]:
        if isinstance(f["type"], dict):
            f["type"].pop("logicalType", None)
    return fastavro.parse_schema(raw)


class Decoder:
    def __init__(self, body: bool = True):
        self.schema = _plain_schema()
        self.rejected_schema = _plain_schema("mqqb_rejected")
        self.body = body                    # False: the envelope only; the body is left to its operator

    def envelope(self, value: bytes | None) -> dict:
        return unframe(value, "envelope", self.schema)[1]

    def check(self, topic: str, value: bytes | None) -> tuple:
        """(protocol, envelope, decoded body, error): the envelope and (if self.body) the body decoded
        with the wire codec; error is the EnvelopeError or WireError of a record that fails, else None."""
        if topic == REJECTED_TOPIC:
            return self.rejected(value)
        protocol = PROTOCOL_OF_TOPIC.get(topic)
        env = None
        try:
            env = self.envelope(value)
            declared = env["protocol"].lower()
            protocol = protocol or declared                  # counted under the topic's protocol
            if protocol != declared:
                raise EnvelopeError("protocol", 0, f"envelope says {env['protocol']} but topic {topic} carries "
                                                   f"{protocol.upper()}")
            return protocol, env, decode(protocol, env["body"]) if self.body else None, None
        except (EnvelopeError, WireError) as exc:
            return protocol, env, None, exc

    def rejected(self, value: bytes | None) -> tuple:
        """A packet a capture producer rejected: always a dead letter (RejectedPacket, the producer's
        reason); its envelope fields are the record's addresses and capture time, its body the
        record itself (the finding's evidence)."""
        try:
            record = decode_rejected(value, self.rejected_schema)
        except EnvelopeError as exc:
            return "mqqb", None, None, exc
        env = dict.fromkeys(ENVELOPE_FIELDS)
        env.update(protocol="MQQB", source_machine=record["source_machine"],
                   destination_machine=record["destination_machine"], destination_queue=None,
                   sent_time=record["arrival_time"], arrival_time=record["arrival_time"], body=value)
        return "mqqb", env, record, RejectedPacket(record)

    def row(self, topic: str, partition: int, offset: int, ts, key: bytes | None, value: bytes | None) -> tuple:
        """One output row, as a tuple in DECODED_ARROW order."""
        key_text = key.decode("utf-8", "replace") if key is not None else None
        protocol, env, record, exc = self.check(topic, value)
        if exc is not None:
            return (topic, partition, offset, ts, key_text, protocol, False, *_envelope_values(env),
                    env["body"] if env else None, None, None, None, exc.structure, exc.field, exc.offset,
                    exc.reason, str(exc), value)
        if record is None:
            return (topic, partition, offset, ts, key_text, protocol, True, *_envelope_values(env),
                    env["body"], None, None, env["destination_machine"], None, None, None, None, None, None)
        kind, flags = summarize(protocol, record)
        return (topic, partition, offset, ts, key_text, protocol, True, *_envelope_values(env),
                env["body"], kind, flags, state_key(protocol, record, env), None, None, None, None, None, None)


_NO_ENVELOPE = (None,) * len(ENVELOPE_FIELDS)


def _envelope_values(env: dict | None) -> tuple:
    if env is None:
        return _NO_ENVELOPE
    return (env["message_id"], env["message_class"], env["sender_identifier_type"], env["sender_identifier"],
            env["authentication_level"], env["hash_algorithm"], env["source_machine"], env["destination_machine"],
            env["destination_queue"], env["sent_time"] * 1000, env["arrival_time"] * 1000)      # ms -> us


def summarize(protocol: str, record) -> tuple[str, str | None]:
    """A short kind (what the message is) and its flags, for counting and display."""
    if protocol == "mqdsrp":
        kind, flags = record.operation_name, record.flags
    elif protocol == "mqcn":
        if record.body is not None:
            kind, flags = f"v2:event {record.body.event}", record.flags + record.body.flags
        else:
            kind, flags = f"v1:{len(record.updates)} updates", record.flags + [f for u in record.updates for f in u.flags]
    else:
        msg = record.message
        kind, flags = record.packet_type, msg.flags
    return kind, ",".join(flags) if flags else None


def state_key(protocol: str, record, env: dict) -> str:
    """What the protocol's stateful operator keys on: the RequestID an MQSD packet belongs to (its
    CorrelationID for a reply); for MQDSRP and MQCN the receiving server (the destination machine)."""
    if protocol == "mqsd":
        return record.client_request.request_id if record.client_request else record.server_reply.correlation_id
    return env["destination_machine"]


def decode_batches(batches, body: bool = True):
    """Source record batches in, DECODED_ARROW batches out (body=False: envelopes only)."""
    decoder = Decoder(body)
    for batch in batches:
        timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
        rows = [decoder.row(t, p, o, ts, k, v) for t, p, o, ts, k, v in zip(
            batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(), timestamps, batch.column("key").to_pylist(),
            batch.column("value").to_pylist())]
        columns = list(zip(*rows)) if rows else [[] for _ in DECODED_FIELDS]
        yield pa.RecordBatch.from_arrays([pa.array(col, type=ty) for col, (_n, ty) in zip(columns, DECODED_FIELDS)],
                                         schema=DECODED_ARROW)


# ---------------------------------------------------------------------------- summary mode
# decode=summary: the reading task decodes every record as above but hands Spark only what the raw
# query's tables need: counts per (protocol, server, minute), one row per Kafka partition (records,
# last offset, dead letters) and each dead letter whole. Per-record rows never cross into the JVM,
# which is most of the cost of a Python source (the throughput target).
SUMMARY_FIELDS = [(name, _ARROW_TYPES[spark_type]) for name, spark_type in SUMMARY_COLUMNS]
SUMMARY_ARROW = pa.schema(SUMMARY_FIELDS)
UNKNOWN = "(unknown)"
_MINUTE_US = 60_000_000


def summarize_records(topic: str, partition: int, records) -> pa.RecordBatch | None:
    """records: (offset, kafka timestamp in us or None, key, value[, capture position]) of one Kafka
    partition, in order."""
    decoder, summary = Decoder(), TaskSummary(topic, partition)
    for offset, ts, key, value, *_capture in records:
        protocol, env, _record, exc = decoder.check(topic, value)
        summary.count(offset, ts, key, value, protocol, env, exc)
    return summary.batch()


class TaskSummary:
    """What a reading task tells the raw tables about its records: counts per (protocol, server,
    minute), one row for its Kafka partition (records, last offset, dead letters) and each dead
    letter whole. The server is the envelope's destination machine, else the record key; the minute
    is the envelope's arrival time, else the Kafka timestamp (as the per-record path counts them)."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self.seen: dict[tuple, list[int]] = {}
        self.dead: list[tuple] = []
        self.n, self.last = 0, None

    def count(self, offset: int, ts, key, value, protocol, env, exc) -> None:
        self.n, self.last = self.n + 1, offset
        server = env["destination_machine"] if env is not None else None
        when = env["arrival_time"] * 1000 if env is not None else ts
        if server is None:
            server = key.decode("utf-8", "replace") if key is not None else UNKNOWN
        group = (protocol or UNKNOWN, server, None if when is None else when - when % _MINUTE_US)
        counts = self.seen.get(group)
        if counts is None:
            counts = self.seen[group] = [0, 0]
        counts[0] += 1
        if exc is not None:
            counts[1] += 1
            self.dead.append(_dead_row(self.topic, self.partition, offset, group[0], key, env, exc, value))

    def batch(self) -> pa.RecordBatch | None:
        if self.n == 0:
            return None
        topic, partition = self.topic, self.partition
        rows = [("partition", topic, partition, self.last, None, None, None, self.n, len(self.dead)) + _NO_DEAD]
        rows += [("seen", topic, partition, None, p, s, m, c[0], c[1]) + _NO_DEAD for (p, s, m), c in self.seen.items()]
        rows += self.dead
        columns = list(zip(*rows))
        return pa.RecordBatch.from_arrays([pa.array(col, type=ty) for col, (_n, ty) in zip(columns, SUMMARY_FIELDS)],
                                          schema=SUMMARY_ARROW)


_NO_DEAD = (None,) * (len(SUMMARY_FIELDS) - 9)


def _dead_row(topic, partition, offset, protocol, key, env, exc, value) -> tuple:
    key_text = key.decode("utf-8", "replace") if key is not None else None
    message_id = source = destination = arrival = None
    if env is not None:
        message_id, source, destination = env["message_id"], env["source_machine"], env["destination_machine"]
        arrival = env["arrival_time"] * 1000
    return ("dead", topic, partition, offset, protocol, None, None, None, None, key_text, message_id, source,
            destination, arrival, exc.structure, exc.field, exc.offset, exc.reason, str(exc), value)


# ---------------------------------------------------------------------------- job mode
# decode=job: the one query's source. Every record is read and decoded (envelope and body) once:
# the good ones become rows for the protocol operators, each with the key of the operator that
# takes it (operator_key), and so does each rejected MQQB packet (a dead letter as well); the
# task's counts and dead letters (TaskSummary) become one more row whose `summary` is an Arrow IPC
# stream of SUMMARY_ARROW rows, passed on to the sink untouched.
JOB_FIELDS = [(name, _ARROW_TYPES[spark_type]) for name, spark_type in JOB_COLUMNS]
JOB_ARROW = pa.schema(JOB_FIELDS)
REPLICA, REQUEST, PASS_ON = "R|", "D|", "P|"        # operator_key prefixes (streaming.spark.job_query)
FINDING = "F|"                                      # a rejected MQQB packet, by sender (a dead letter too)
JOB_CHUNK = 20_000


def job_batches(topic: str, partition: int, records, chunk: int = JOB_CHUNK, clock_ms: int | None = None):
    """records: (offset, kafka timestamp in us or None, key, value[, capture position]) of one Kafka
    partition, in order. After the records: the task's clock row (clock_ms, the micro-batch's clock,
    or the latest arrival time among the rows it yields if later) and its summary row."""
    from ..sinks.typed import ipc_bytes
    decoder, summary = Decoder(), TaskSummary(topic, partition)
    pass_on = f"{PASS_ON}{topic}|{partition}"
    rows: list[tuple] = []
    latest_us = None if clock_ms is None else clock_ms * 1000
    for offset, ts, key, value, *capture in records:
        protocol, env, record, exc = decoder.check(topic, value)
        summary.count(offset, ts, key, value, protocol, env, exc)
        if exc is None or isinstance(exc, RejectedPacket):
            key = FINDING + env["source_machine"] if exc is not None else _operator_key(protocol, record, env, pass_on)
            arrival_us = env["arrival_time"] * 1000
            if latest_us is None or arrival_us > latest_us:
                latest_us = arrival_us
            rows.append((key, topic, partition, offset, protocol,
                         env["message_id"], env["message_class"], env["sender_identifier_type"],
                         env["authentication_level"], env["source_machine"], env["destination_machine"],
                         env["destination_queue"], arrival_us, env["body"], capture[0] if capture else None, None,
                         None))
            if len(rows) >= chunk:
                yield _job_batch(rows)
                rows = []
    if latest_us is not None:
        rows.append((pass_on, topic, partition) + (None,) * (len(JOB_FIELDS) - 5) + (latest_us, None))
    counted = summary.batch()
    if counted is not None:
        rows.append((pass_on, topic, partition) + (None,) * (len(JOB_FIELDS) - 4) + (ipc_bytes(counted),))
    if rows:
        yield _job_batch(rows)


def _operator_key(protocol: str, record, env: dict, pass_on: str) -> str:
    if protocol == "mqdsrp":
        return REPLICA + env["destination_machine"]
    if protocol == "mqsd":
        return REQUEST + state_key(protocol, record, env)
    return pass_on                          # MQCN: to the queue managers, behind the replicas


def _job_batch(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(col, type=ty) for col, (_n, ty) in zip(columns, JOB_FIELDS)],
                                      schema=JOB_ARROW)
