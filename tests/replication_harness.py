"""Drive the sans-IO replica with simulated traffic, without Spark or Kafka.

Messages are grouped by receiving server in arrival order, as the streaming operator sees them;
outbound messages can be answered by the authority responder's core and fed back, the way the
job and `dirstream produce respond` do it through Kafka. Rows are kept like the sink keeps
them: the last row per table key wins.
"""
from datetime import datetime

from producers.responder import Authorities
from streaming.wire.envelope import make_envelope
from streaming.operators.notification_rows import directory_version
from streaming.operators.notification_rows import step_rows as qm_rows
from streaming.operators.notifications import QMState, QueueManager, Settings, notification_from, queue_manager_of
from streaming.operators.replica_store import DictBackend, ObjectStore
from streaming.operators.replication import Replica, ServerState
from streaming.operators.replication_rows import step_rows
from streaming.sinks import TABLES
from streaming.wire import WireError, decode


def _decodable(protocol: str, envelopes: list[dict]):
    """(envelope, decoded body) of each envelope whose body decodes; the others are dead letters,
    which never reach the operators."""
    for env in envelopes:
        try:
            yield env, decode(protocol, env["body"])
        except WireError:
            continue


def arrival_ms(envelope: dict) -> int:
    t = envelope["arrival_time"]
    return int(t.timestamp() * 1000) if isinstance(t, datetime) else int(t)


class OfflineJob:
    def __init__(self, truth: dict | None = None, pec_name: str | None = None, cn_settings: Settings | None = None,
                 watermark_delay_ms: int = 10_000):
        self.states: dict[str, tuple[ServerState, DictBackend]] = {}
        self.qms: dict[str, QMState] = {}
        self.cn_settings = cn_settings or Settings()
        self.watermark_delay_ms = watermark_delay_ms
        self.max_event_ms = 0
        self.tables: dict[str, dict[tuple, dict]] = {}
        self.authorities = Authorities(truth) if truth else None
        self.pec_name = pec_name
        self.answers: list[tuple[str, dict]] = []
        self.outbound: list[dict] = []

    def replica(self, server: str) -> Replica:
        state, backend = self.states.setdefault(server, (ServerState(server), DictBackend()))
        return Replica(state, ObjectStore(backend), self.pec_name)

    def feed(self, envelopes: list[dict]) -> None:
        """One micro-batch: each server's messages in arrival order, one step per server; then each
        queue manager's notifications; then the timers the watermark has passed."""
        by_server: dict[str, list[dict]] = {}
        by_qm: dict[str, list[dict]] = {}
        for env in sorted(envelopes, key=arrival_ms):
            self.max_event_ms = max(self.max_event_ms, arrival_ms(env))
            if env["protocol"].lower() == "mqdsrp":
                by_server.setdefault(env["destination_machine"], []).append(env)
            elif env["protocol"].lower() == "mqcn":
                key = queue_manager_of(env["destination_queue"]) or env["destination_machine"]
                by_qm.setdefault(key, []).append(env)
        for server, envs in by_server.items():
            r = self.replica(server)
            for env, msg in _decodable("mqdsrp", envs):
                r.receive(msg, arrival_ms=arrival_ms(env), source=env["source_machine"],
                          message_class=env["message_class"], destination_queue=env["destination_queue"],
                          body=env["body"])
            self._collect(r)
        for key, envs in by_qm.items():
            qm = self.queue_manager(key)
            for env, msg in _decodable("mqcn", envs):
                qm.receive(notification_from(msg, message_id=env["message_id"], arrival_ms=arrival_ms(env),
                                             sender_identifier_type=env["sender_identifier_type"],
                                             authentication_level=env["authentication_level"],
                                             source=env["source_machine"],
                                             destination_queue=env["destination_queue"]), env["destination_machine"])
            self._collect_qm(qm)
        self.fire_qm_timers(self.max_event_ms - self.watermark_delay_ms)

    def queue_manager(self, key: str) -> QueueManager:
        return QueueManager(self.qms.setdefault(key, QMState(key)), self.cn_settings)

    def fire_qm_timers(self, watermark_ms: int) -> None:
        for key in list(self.qms):
            qm = self.queue_manager(key)
            qm.on_timer(watermark_ms)
            self._collect_qm(qm)

    def _collect_qm(self, qm: QueueManager) -> None:
        for table, row in qm_rows(qm):
            key = tuple(row[c] for c in TABLES[table].key)
            self.tables.setdefault(table, {})[key] = row

    def fire_timers(self, now_ms: int) -> None:
        for server in list(self.states):
            r = self.replica(server)
            due = r.next_timer_ms()
            if due is not None and due <= now_ms:
                r.on_timer(now_ms)
                self._collect(r)

    def _collect(self, r: Replica) -> None:
        r.store.flush()
        for table, row in step_rows(r, r.s.now_ms):
            key = tuple(row[c] for c in TABLES[table].key)
            self.tables.setdefault(table, {})[key] = row
            if table == "directory_objects":
                routed = directory_version(row)
                if routed:
                    owner, guid, version = routed
                    qm = self.queue_manager(owner)
                    qm.directory_object(guid, version)
                    self._collect_qm(qm)
            if table == "outbound_messages":
                self.outbound.append(row)
                self._answer(row)

    def _answer(self, row: dict) -> None:
        if self.authorities is None or row["operation"] not in ("SyncRequest", "ChangeRequest"):
            return
        env = make_envelope("mqdsrp", bytes.fromhex(row["body"]), source_machine=row["server"],
                            destination_machine=row["destination"], destination_queue="",
                            sent_time=datetime.fromisoformat(row["sent_at"]),
                            arrival_time=datetime.fromisoformat(row["sent_at"]), message_id=row["message_id"])
        for ans in self.authorities.answer(env):
            self.answers.append((ans.key, ans.envelope))

    def run_until_quiet(self, rounds: int = 50) -> None:
        """Feed the responder's answers back until there are none."""
        for _ in range(rounds):
            if not self.answers:
                return
            answers, self.answers = self.answers, []
            self.feed([env for _key, env in answers])
        raise AssertionError("replicas kept asking after 50 rounds")

    def rows(self, table: str) -> list[dict]:
        return list(self.tables.get(table, {}).values())
