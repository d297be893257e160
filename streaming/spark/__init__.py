"""The Spark layer: the Kafka source and its offsets, decoding, the plumbing every stateful operator
shares, one module per protocol operator, and the job's one query that chains them (job_query). Adapters only: the
protocol logic is in streaming.operators, the byte layouts in streaming.wire."""

__all__ = ["RECORDS_PER_TASK"]

# The job reads a Kafka partition's range in Spark tasks of at most this many records, so that
# every core stays busy when a few servers (record keys) fill most of the partitions.
RECORDS_PER_TASK = 25_000
