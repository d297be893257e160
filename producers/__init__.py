"""Producer scripts: publish MQCN, MQDSRP and MQSD traffic to Kafka (encode side of streaming.wire)."""

__all__: list[str] = []
