"""Topic names and the protocol each raw topic carries."""
TOPICS = {"mqdsrp": "msmq.dsrp.raw", "mqcn": "msmq.cn.raw", "mqsd": "msmq.sd.raw"}
OUTBOUND_TOPIC = "msmq.dsrp.out"
PROTOCOL_OF_TOPIC = {topic: protocol for protocol, topic in TOPICS.items()}
PROTOCOL_HEADER = "protocol"
# Internal topics the job derives: the replicas' directory versions for the MQCN operator, and the
# replication query's progress (which offsets of the replication topic it has fully processed).
OBJECTS_TOPIC = "msmq.dsrp.objects"
PROGRESS_TOPIC = "msmq.dsrp.progress"
