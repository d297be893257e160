"""The sink tables (docs/tables.md): each table's columns, key, and how a row meets the stored row
of its key (`Table.mode`); TABLES holds them all by name."""
from dataclasses import dataclass

__all__ = ["SQL_TYPES", "TABLES", "Table", "open_rows_index", "table"] + [
    "SINK_BATCHES", "DEAD_LETTERS", "RAW_MESSAGES_SEEN", "PIPELINE_PROGRESS", "DISCOVERY_REQUESTS", "SITE_TOPOLOGY",
    "DISCOVERY_UNMATCHED", "REPLICATION_SERVERS", "REPLICATION_PARTITIONS", "DIRECTORY_OBJECTS", "DELETED_OBJECTS",
    "DIRECTORY_HISTORY", "PENDING_CHANGES", "OUTBOUND_MESSAGES", "QUEUE_MANAGERS", "QM_QUEUES", "NOTIFICATIONS",
    "NOTIFICATION_BATCHES", "SECURITY_FINDINGS"]


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]        # (name, type): text, bigint, double, bool, bytes, timestamp, json
    key: tuple[str, ...]
    mode: str = "insert"                        # insert (keep first) | accumulate (add counts) | replace (upsert)
    counters: tuple[str, ...] = ()
    keep_min: tuple[str, ...] = ()              # replace mode: columns that keep the smaller value (first seen)
    keep_max: tuple[str, ...] = ()              # replace mode: columns that keep the larger value (last seen)
    first_by: str = ""                          # replace mode: a row replaces the stored one only if this
    #                                             column is not later (the earliest row of a key stays)
    successor: tuple = ()   # (ends, starts, series columns, order): a row's `ends` is set to the `starts`
    #                         of the next row (by `order`) of its series, once that row is written

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]


TABLES: dict[str, Table] = {}


def open_rows_index(t: Table) -> str:
    """The rows of a series not closed yet (successor tables): closing them is one index lookup, not
    a walk over every row the series ever had (a queue gathers hundreds of versions of
    directory_history in an hour, and the writer would slow down as they grow)."""
    ends, _starts, series, _order = t.successor
    return f"CREATE INDEX IF NOT EXISTS {t.name}_open ON {t.name} ({', '.join(series)}) WHERE {ends} IS NULL"


def table(name, columns, key, mode="insert", counters=(), keep_min=(), keep_max=(), first_by="",
          successor=()) -> Table:
    t = Table(name, tuple(columns), tuple(key), mode, tuple(counters), tuple(keep_min), tuple(keep_max), first_by,
              tuple(successor))
    TABLES[name] = t
    return t


SINK_BATCHES = table("sink_batches", [("query_id", "text"), ("batch_id", "bigint"), ("committed_at", "timestamp")],
                     ["query_id", "batch_id"])
DEAD_LETTERS = table("dead_letters", [
    ("topic", "text"), ("kafka_partition", "bigint"), ("kafka_offset", "bigint"), ("batch_id", "bigint"),
    ("kafka_key", "text"), ("protocol", "text"), ("error_structure", "text"), ("error_field", "text"),
    ("error_offset", "bigint"), ("error_reason", "text"), ("error", "text"), ("raw_value", "bytes"),
    ("message_id", "text"), ("source_machine", "text"), ("destination_machine", "text"),
    ("arrival_time", "timestamp"), ("recorded_at", "timestamp"), ("stage", "text")],
    ["topic", "kafka_partition", "kafka_offset"])
RAW_MESSAGES_SEEN = table("raw_messages_seen", [
    ("protocol", "text"), ("server", "text"), ("minute", "timestamp"), ("messages", "bigint"),
    ("dead_letters", "bigint")], ["protocol", "server", "minute"], mode="accumulate",
    counters=("messages", "dead_letters"))
PIPELINE_PROGRESS = table("pipeline_progress", [
    ("query_id", "text"), ("batch_id", "bigint"), ("started_at", "timestamp"), ("finished_at", "timestamp"),
    ("input_rows", "bigint"), ("good_rows", "bigint"), ("dead_letters", "bigint"), ("rows_per_second", "double"),
    ("duration_ms", "bigint"), ("end_offsets", "json"), ("lag", "json"), ("total_lag", "bigint"),
    ("skipped_offsets", "bigint"), ("query_name", "text"), ("state_rows", "bigint"), ("state_memory_bytes", "bigint"),
    ("late_rows", "bigint"), ("timers_fired", "bigint")], ["query_id", "batch_id"])

DISCOVERY_REQUESTS = table("discovery_requests", [
    ("request_id", "text"), ("enterprise_id", "text"), ("client_site", "text"), ("client", "text"),
    ("sent_at", "timestamp"), ("outcome", "text"), ("directory_servers", "json"), ("connected_networks", "json"),
    ("replies", "bigint"), ("completed_at", "timestamp")], ["request_id"], mode="replace", first_by="sent_at")
# first_by: a copy of a request delivered after its request was completed and forgotten (MQSD
# discovery operator) starts it again; the client decided on its first copy (MS-MQSD 3.1.6.1), so
# that row stays, whichever is written first.
SITE_TOPOLOGY = table("site_topology", [
    ("site_id", "text"), ("directory_server", "text"), ("ip_supported", "bool"), ("ipx_supported", "bool"),
    ("connected_networks", "json"), ("first_seen", "timestamp"), ("last_seen", "timestamp")],
    ["site_id", "directory_server"], mode="replace", keep_min=("first_seen",), keep_max=("last_seen",))
DISCOVERY_UNMATCHED = table("discovery_unmatched_replies", [
    ("request_id", "text"), ("responder", "text"), ("arrival_time", "timestamp"), ("reason", "text"),
    ("directory_service_server_size", "bigint"), ("connected_networks", "json")],
    ["request_id", "responder", "arrival_time"])

# MC-MQDSRP replicas (streaming/spark/replication_query.py): one row per server, partition, object, ...
REPLICATION_SERVERS = table("replication_servers", [
    ("server", "text"), ("role", "text"), ("site_id", "text"), ("psc_name", "text"), ("pec_name", "text"),
    ("psc_neighbors", "json"), ("bsc_neighbors", "json"), ("deleted_objects", "bigint"),
    ("forwarded_requests", "bigint"), ("updated_at", "timestamp")], ["server"], mode="replace")
REPLICATION_PARTITIONS = table("replication_partitions", [
    ("server", "text"), ("partition_id", "text"), ("authority", "text"), ("owned", "bool"), ("last_seq", "text"),
    ("purged_seq", "text"), ("allowed_purge_seq", "text"), ("purge_state", "text"), ("pending_count", "bigint"),
    ("change_missing_window", "text"), ("updated_at", "timestamp"), ("seen_seq", "text"),
    ("last_change_at", "timestamp")], ["server", "partition_id"], mode="replace")
DIRECTORY_OBJECTS = table("directory_objects", [
    ("server", "text"), ("object_guid", "text"), ("partition_id", "text"), ("object_type", "text"),
    ("path_name", "text"), ("seq_number", "text"), ("deleted", "bool"), ("properties", "json"),
    ("updated_at", "timestamp")], ["server", "object_guid"], mode="replace")
DELETED_OBJECTS = table("deleted_objects", [
    ("server", "text"), ("identifier", "text"), ("partition_id", "text"), ("seq_number", "text"),
    ("object_type", "text"), ("scope", "bigint"), ("status", "text"), ("updated_at", "timestamp")],
    ["server", "identifier"], mode="replace")
DIRECTORY_HISTORY = table("directory_history", [
    ("server", "text"), ("object_guid", "text"), ("version", "bigint"), ("partition_id", "text"),
    ("object_type", "text"), ("path_name", "text"), ("seq_number", "text"), ("kind", "text"),
    ("properties", "json"), ("valid_from", "timestamp"), ("valid_to", "timestamp")],
    ["server", "object_guid", "version"], successor=("valid_to", "valid_from", ("server", "object_guid"), "version"))
PENDING_CHANGES = table("pending_changes", [
    ("server", "text"), ("partition_id", "text"), ("seq_number", "text"), ("previous_seq_number", "text"),
    ("command", "text"), ("object", "text"), ("status", "text"), ("updated_at", "timestamp")],
    ["server", "partition_id", "seq_number"], mode="replace")
OUTBOUND_MESSAGES = table("outbound_messages", [
    ("message_id", "text"), ("server", "text"), ("destination", "text"), ("operation", "text"), ("reason", "text"),
    ("partition_id", "text"), ("detail", "json"), ("body", "text"), ("sent_at", "timestamp")], ["message_id"])

# MS-MQCN queue managers (streaming/spark/notification_query.py)
QUEUE_MANAGERS = table("queue_managers", [
    ("machine_id", "text"), ("machine_name", "text"), ("quota", "bigint"), ("journal_quota", "bigint"),
    ("security", "text"), ("updated_at", "timestamp"), ("notifications_waiting", "bigint"),
    ("unresolved_reads", "bigint"), ("last_processed_at", "timestamp"), ("qm_read_at", "timestamp"),
    ("qm_read_seq", "text"), ("qm_since_read", "json")], ["machine_id"], mode="replace")
QM_QUEUES = table("qm_queues", [
    ("queue_manager", "text"), ("queue_guid", "text"), ("path_name", "text"), ("type", "text"), ("label", "text"),
    ("base_priority", "bigint"), ("journal", "bigint"), ("quota", "bigint"), ("journal_quota", "bigint"),
    ("create_time", "bigint"), ("modify_time", "bigint"), ("security", "text"), ("authenticate", "bigint"),
    ("priv_level", "bigint"), ("transactional", "bigint"), ("scope", "bigint"), ("deleted", "bool"),
    ("last_notification", "text"), ("updated_at", "timestamp"), ("read_at", "timestamp"), ("read_seq", "text"),
    ("since_read", "json")], ["queue_manager", "queue_guid"], mode="replace")
NOTIFICATIONS = table("notifications", [
    ("queue_manager", "text"), ("message_id", "text"), ("update_index", "bigint"), ("version", "bigint"),
    ("action", "text"), ("object_guid", "text"), ("outcome", "text"), ("reason", "text"), ("batch", "bigint"),
    ("arrival_at", "timestamp"), ("processed_at", "timestamp")], ["queue_manager", "message_id", "update_index"],
    mode="replace")
NOTIFICATION_BATCHES = table("notification_batches", [
    ("queue_manager", "text"), ("batch", "bigint"), ("timer_started", "timestamp"), ("fired_at", "timestamp"),
    ("count", "bigint"), ("refresh_all", "bool")], ["queue_manager", "batch"], mode="replace")

# Security findings (streaming/operators/findings.py): one row per (kind, source, target) and hour,
# the whole aggregate so far (an operator key keeps it in its state).
SECURITY_FINDINGS = table("security_findings", [
    ("kind", "text"), ("severity", "text"), ("source", "text"), ("target", "text"), ("bucket", "timestamp"),
    ("first_seen", "timestamp"), ("last_seen", "timestamp"), ("count", "bigint"), ("evidence", "json"),
    ("detail", "json")], ["kind", "source", "target", "bucket"], mode="replace")

SQL_TYPES = {
    "sqlite": {"text": "TEXT", "bigint": "INTEGER", "double": "REAL", "bool": "INTEGER", "bytes": "BLOB",
               "timestamp": "TEXT", "json": "TEXT"},
    "postgresql": {"text": "TEXT", "bigint": "BIGINT", "double": "DOUBLE PRECISION", "bool": "BOOLEAN",
                   "bytes": "BYTEA", "timestamp": "TIMESTAMPTZ", "json": "JSONB"},
}
