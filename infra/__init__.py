"""Infrastructure helpers: the embedded Kafka-compatible broker."""

__all__: list[str] = []
