"""The columns of the Kafka source's rows in each decode mode (streaming/spark/decode.py), as Spark
types. No pyarrow here: Spark asks a source for its schema in short-lived planning workers
(create_data_source), which linger a minute after the job starts, when a catch-up's first batches
run; pyarrow there is 40 MB more."""

__all__ = ["ddl", "DECODED_COLUMNS", "DECODED_DDL", "JOB_COLUMNS", "JOB_DDL", "SUMMARY_COLUMNS", "SUMMARY_DDL"]

DECODED_COLUMNS = (
    ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
    ("kafka_timestamp", "timestamp"), ("key", "string"), ("protocol", "string"),
    ("ok", "boolean"), ("message_id", "string"), ("message_class", "string"),
    ("sender_identifier_type", "string"), ("sender_identifier", "string"),
    ("authentication_level", "string"), ("hash_algorithm", "string"), ("source_machine", "string"),
    ("destination_machine", "string"), ("destination_queue", "string"),
    ("sent_time", "timestamp"), ("arrival_time", "timestamp"),
    ("body", "binary"), ("kind", "string"), ("flags", "string"), ("state_key", "string"),
    ("error_structure", "string"), ("error_field", "string"), ("error_offset", "bigint"),
    ("error_reason", "string"), ("error", "string"), ("raw_value", "binary"),
)
# decode=summary (decode.summarize_records)
SUMMARY_COLUMNS = (
    ("row_type", "string"),                     # "partition", "seen" or "dead"
    ("topic", "string"), ("partition", "int"),
    ("offset", "bigint"),                       # partition: the last offset read; dead: its offset
    ("protocol", "string"), ("server", "string"), ("minute", "timestamp"),
    ("messages", "bigint"), ("dead_letters", "bigint"),
    ("kafka_key", "string"), ("message_id", "string"), ("source_machine", "string"),
    ("destination_machine", "string"), ("arrival_time", "timestamp"),
    ("error_structure", "string"), ("error_field", "string"), ("error_offset", "bigint"),
    ("error_reason", "string"), ("error", "string"), ("raw_value", "binary"),
)

# decode=job (decode.job_batches): a good record for the operator of operator_key, or (summary set,
# everything else but topic and partition null) a reading task's SUMMARY_COLUMNS rows as Arrow IPC,
# or (clock_time set, the rest null but the key, topic and partition) the task's clock row: the
# micro-batch's clock (the latest arrival time planned), or its own records' latest if later.
# The operators' watermark is on clock_time alone, null on every other row, so Spark drops no
# record as late (streaming.spark.job_query).
JOB_COLUMNS = (
    ("operator_key", "string"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
    ("protocol", "string"), ("message_id", "string"), ("message_class", "string"),
    ("sender_identifier_type", "string"), ("authentication_level", "string"), ("source_machine", "string"),
    ("destination_machine", "string"), ("destination_queue", "string"), ("arrival_time", "timestamp"),
    ("body", "binary"), ("capture", "string"), ("clock_time", "timestamp"), ("summary", "binary"),
)


def ddl(columns) -> str:
    return ", ".join(f"{name} {spark_type}" for name, spark_type in columns)


DECODED_DDL, SUMMARY_DDL, JOB_DDL = ddl(DECODED_COLUMNS), ddl(SUMMARY_COLUMNS), ddl(JOB_COLUMNS)
