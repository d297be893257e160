"""Topic names and the protocol each raw topic carries."""
TOPICS = {"mqdsrp": "msmq.dsrp.raw", "mqcn": "msmq.cn.raw", "mqsd": "msmq.sd.raw"}
OUTBOUND_TOPIC = "msmq.dsrp.out"
# MQQB packets the capture producers could not read (schemas/mqqb_rejected.avsc), keyed by sender
REJECTED_TOPIC = "msmq.qb.rejected"
# what the job reads: the three protocols' raw topics and the rejected packets
SOURCE_TOPICS = (*TOPICS.values(), REJECTED_TOPIC)
PROTOCOL_OF_TOPIC = {topic: protocol for protocol, topic in TOPICS.items()}
PROTOCOL_HEADER = "protocol"
