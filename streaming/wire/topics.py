"""Topic and group names, the protocol each raw topic carries, and how a refused ACL is told."""

__all__ = ["acl_refused", "CAPTURE_HEADER", "capture_header", "CAPTURE_KEY", "JOB_GROUP", "OUTBOUND_TOPIC",
           "PROTOCOL_HEADER", "PROTOCOL_OF_TOPIC", "RECORD_BODY_BYTES", "REJECTED_TOPIC", "RESPONDER_GROUP",
           "SOURCE_TOPICS", "TOPICS"]
TOPICS = {"mqdsrp": "msmq.dsrp.raw", "mqcn": "msmq.cn.raw", "mqsd": "msmq.sd.raw"}
OUTBOUND_TOPIC = "msmq.dsrp.out"
# MQQB packets the capture producers could not read (schemas/mqqb_rejected.avsc), keyed by sender
REJECTED_TOPIC = "msmq.qb.rejected"
# what the job reads: the three protocols' raw topics and the rejected packets
SOURCE_TOPICS = (*TOPICS.values(), REJECTED_TOPIC)
PROTOCOL_OF_TOPIC = {topic: protocol for protocol, topic in TOPICS.items()}
PROTOCOL_HEADER = "protocol"
# The job's consumers are assigned their partitions and commit nothing: they need no group, but
# confluent-kafka wants a group.id, and librdkafka asks for its coordinator (refused without Describe
# on the group, which the readers pass over): one name for all of them.
JOB_GROUP = "dirstream-job"
# the responders' subscription (its offsets say where a new responder goes on); also its clock reader's
RESPONDER_GROUP = "dirstream-responder"
# A body a producer publishes at most: Kafka's clients refuse a record over 1,000,000 bytes by
# default, and the envelope around the body adds a few hundred.
RECORD_BODY_BYTES = 900_000
# a message taken from a packet capture: where it is in the capture, as JSON {"capture": the file
# or interface, "position": the packet and, for MQQB, the TCP flow and stream byte}
CAPTURE_HEADER = "capture"
CAPTURE_KEY = "capture_position"        # the envelope dict's key a capture producer sets (not Avro)


def capture_header(where: str) -> bytes:
    """A capture producer's position text ("<file>:packet <n> (...)") as the header's JSON."""
    import json
    capture, sep, position = where.rpartition(":packet ")
    if not sep:
        capture, _, position = where.rpartition(":")
        return json.dumps({"capture": capture, "position": position}).encode()
    return json.dumps({"capture": capture, "position": "packet " + position}).encode()


def acl_refused(user: str | None, operation: str, resource: str, name: str, note: str = "") -> str:
    """The one line that says which ACL Kafka's authorizer refused, e.g. operation Write, resource topic."""
    who = f"user {user!r}" if user else "this client (no sasl.username)"
    return (f"Kafka refused {operation} on {resource} {name} to {who}{note}: grant it "
            f"(see docs/configuration.md, \"The ACLs each command needs\")")
