"""Infrastructure helpers: the embedded Kafka-compatible broker."""
