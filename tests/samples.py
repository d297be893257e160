"""One well-formed instance of every message type, built through the codecs' own builders."""
from streaming.wire import mqcn, mqdsrp, mqsd
from streaming.wire.properties import Property
from streaming.wire.propids import propid
from streaming.wire.seqnum import MAX_SEQ_NUMBER

ENTERPRISE = "e6eaba61-d1c6-11db-baac-0003ff4e2d22"
SITE_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
SITE_B = "dcc51bf6-d4ad-4543-8739-71568e8f9128"
QM = "11223344-5566-7788-99aa-bbccddeeff00"
QUEUE = "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90"
NULL = "00000000-0000-0000-0000-000000000000"


def P(name, value):
    return Property(propid(name), value)


def queue_create_properties():
    """The 15 PROPIDs a v1 queue creation MUST carry (MQCN 3.3.5.2)."""
    return [
        P("Q_TYPE", NULL), P("Q_INSTANCE", QUEUE), P("Q_BASEPRIORITY", -3), P("Q_JOURNAL", 1), P("Q_QUOTA", 4096),
        P("Q_JOURNAL_QUOTA", 0xFFFFFFFF), P("Q_CREATE_TIME", 1_700_000_000), P("Q_MODIFY_TIME", -1),
        P("Q_SCOPE", 1), P("Q_SECURITY", b"\x01\x00\x04\x80" + bytes(16)), P("Q_PATHNAME", "host1\\orders"),
        P("Q_LABEL", "Orders \u00e9\U0001F600"), P("Q_AUTHENTICATE", 0), P("Q_PRIV_LEVEL", 1), P("Q_TRANSACTION", 1),
    ]


def machine_properties():
    return [P("QM_MACHINE_ID", QM), P("QM_FOREIGN", 0), P("QM_QUOTA", 1 << 20), P("QM_CNS", [SITE_A, SITE_B]),
            P("QM_ADDRESS", bytes([4, 0, 1, 0, 10, 0, 0, 1])), P("QM_SERVICE", 2), P("QM_MACHINE_TYPE", "")]


def mqcn_messages():
    create = mqcn.new_update(0x00, queue_create_properties(), SITE_A, path_name="host1\\orders")
    update = mqcn.new_update(0x01, [P("Q_QMID", QM), P("Q_QUOTA", 10)], SITE_A, guid_identifier=QUEUE)
    machine = mqcn.new_update(0x01, machine_properties(), SITE_A, guid_identifier=QM)
    delete = mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], SITE_A, guid_identifier=QUEUE)
    return {
        "v1_create": mqcn.new_v1([create]),
        "v1_batch": mqcn.new_v1([create, update, machine, delete]),
        "v2_change_queue": mqcn.new_v2(2, QUEUE, "DC1"),
        "v2_change_machine": mqcn.new_v2(4, QM, "dc-02.corp"),
    }


def directory_change(seq: int, command=mqdsrp.CMD_UPDATE, props=None) -> mqdsrp.DirectoryChange:
    props = props if props is not None else [P("Q_QUOTA", seq), P("Q_LABEL", f"label {seq}")]
    return mqdsrp.DirectoryChange(command, 1, None, QUEUE, SITE_A, seq - 1, seq, 0, props)


def mqdsrp_messages():
    create = mqdsrp.DirectoryChange(mqdsrp.CMD_CREATE, 0, "host1\\orders", None, SITE_A, 0, 1, 0,
                                    queue_create_properties())
    delete = mqdsrp.DirectoryChange(mqdsrp.CMD_DELETE, 1, None, QUEUE, SITE_A, 1, 2, 0,
                                    [P("D_SCOPE", 1), P("D_OBJTYPE", 1)])
    header = mqdsrp.SeqNumberHeader(2, "PEC0", [mqdsrp.PartitionSeqNumbers(NULL, 300, 40),
                                                mqdsrp.PartitionSeqNumbers(SITE_A, 2, 0)])
    return {k: mqdsrp.new_message(SITE_A, v) for k, v in {
        "change_propagation": mqdsrp.ChangePropagationMessage(0, 3, [create, delete, directory_change(3)], header),
        "change_propagation_empty": mqdsrp.ChangePropagationMessage(1, 0, [], mqdsrp.SeqNumberHeader(0)),
        "change_request_bsc": mqdsrp.ChangeRequestMessage(
            mqdsrp.ChangeRequestHeader(SITE_A, 77, 5, "BSC1", "PSC1"), create),
        "change_request_psc": mqdsrp.ChangeRequestMessage(
            mqdsrp.ChangeRequestHeader(NULL, 78, 0, "PSC1"), directory_change(1, mqdsrp.CMD_SYNC)),
        "sync_request": mqdsrp.SyncRequestMessage(NULL, 0, MAX_SEQ_NUMBER, 0, 0, 1, "PSC1"),
        "sync_reply": mqdsrp.SyncReplyMessage(mqdsrp.SyncReplyHeader(SITE_A, 0, 3, 0, 3, 2),
                                              [create, delete, directory_change(3)]),
        "change_reply": mqdsrp.ChangeReplyMessage(77, 0xC00E0001, "BSC1"),
        "already_purged": mqdsrp.AlreadyPurgedMessage(SITE_A, 1024),
        "psc_ack": mqdsrp.PSCAckMessage(SITE_A, NULL, 0x100, "PSC1"),
        "bsc_ack": mqdsrp.BSCAckMessage(QM, "BSC1"),
    }.items()}


def mqsd_messages():
    servers = [mqsd.DirectoryServiceServerEntry(True, False, "nt4pec"),
               mqsd.DirectoryServiceServerEntry(True, True, "psc-\u00e9t\u00e9")]
    return {
        "request_ip": mqsd.new_request(ENTERPRISE, QUEUE, SITE_B),
        "request_ipx": mqsd.new_request(ENTERPRISE, QUEUE, SITE_B, [0x0A000001, 0xFFFFFFFF]),
        "reply_local": mqsd.new_reply(QUEUE, [SITE_A]),
        "reply_remote": mqsd.new_reply(QUEUE, [SITE_A, SITE_B], SITE_A, servers),
        "reply_ipx": mqsd.new_reply(QUEUE, [SITE_A, SITE_B], mask=0b101),
    }


ALL = {"mqcn": mqcn_messages, "mqdsrp": mqdsrp_messages, "mqsd": mqsd_messages}


def encoded_samples() -> list[tuple[str, str, bytes]]:
    from streaming.wire import encode
    return [(protocol, name, encode(protocol, record)) for protocol, build in ALL.items()
            for name, record in build().items()]
