"""The Spark layer: the Kafka source and its offsets, decoding, the plumbing every stateful operator
shares, one module per query, and the pipeline that composes and starts them. Adapters only: the
protocol logic is in streaming.operators, the byte layouts in streaming.wire."""

# The raw query reads a Kafka partition's range in Spark tasks of at most this many records, so that
# every core stays busy when a few servers (record keys) fill most of the partitions.
RECORDS_PER_TASK = 25_000
