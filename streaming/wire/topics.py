"""Topic names and the protocol each raw topic carries."""
TOPICS = {"mqdsrp": "msmq.dsrp.raw", "mqcn": "msmq.cn.raw", "mqsd": "msmq.sd.raw"}
OUTBOUND_TOPIC = "msmq.dsrp.out"
PROTOCOL_OF_TOPIC = {topic: protocol for protocol, topic in TOPICS.items()}
PROTOCOL_HEADER = "protocol"
