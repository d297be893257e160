"""Drive the sans-IO replica with simulated traffic, without Spark or Kafka.

Messages are grouped by receiving server in arrival order, as the streaming operator sees them;
outbound messages can be answered by the authority responder's core and fed back, the way the
job and `dirstream produce respond` do it through Kafka. Rows are kept like the sink keeps
them: the last row per table key wins.
"""
import itertools
import random
import json
from datetime import datetime

from producers.responder import Authorities
from streaming.wire.envelope import make_envelope
from streaming.operators.findings import evidence
from streaming.operators.notification_rows import FirstArrivals
from streaming.operators.notification_rows import step_rows as qm_rows
from streaming.operators.notification_input import Row, advance, directory_row, split
from streaming.operators.notifications import QMState, QueueManager, Settings, queue_manager_of
from streaming.operators.replica_store import DictBackend, ObjectStore
from streaming.operators.replication import Replica, ServerState
from streaming.operators.replication_rows import REGISTRY, step_rows
from streaming.operators.server_registry import ServerRegistry, advance as advance_registry, check_text
from streaming.operators.discovery import Reply, reply_check
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
                 watermark_delay_ms: int = 10_000, first_arrivals: bool = False, tasks: int = 0, seed: int = 0):
        self.first_arrivals = FirstArrivals() if first_arrivals else None   # as the job publishes them
        # tasks > 0: each micro-batch's servers go to that many reading tasks at random, each passing
        # its versions through its own FirstArrivals.pre_select first, as the operator does
        self.tasks, self.rng = tasks, random.Random(seed)
        self.task_of: dict[str, FirstArrivals] = {}
        self.states: dict[str, tuple[ServerState, DictBackend]] = {}
        self.qms: dict[str, QMState] = {}
        self.cn_settings = cn_settings or Settings()
        self.watermark_delay_ms = watermark_delay_ms
        self.max_event_ms = 0
        self.tables: dict[str, dict[tuple, dict]] = {}
        self.authorities = Authorities(truth) if truth else None
        self.pec_name = pec_name
        self.answers: list[tuple[str, dict]] = []
        self.registry = ServerRegistry(configured=(pec_name,) if pec_name else ())
        self.registry_held: list[Row] = []
        self.outbound: list[dict] = []
        self.held: dict[str, list[Row]] = {}          # queue manager -> rows the clock has not passed yet
        self.versions_published = 0
        self.versions_dropped_in_tasks = 0
        self.history: list[dict] = []                  # directory_history rows, in order, until taken
        self.offsets, self.answer_offsets = itertools.count(), itertools.count(10**12)

    def replica(self, server: str) -> Replica:
        state, backend = self.states.setdefault(server, (ServerState(server), DictBackend()))
        return Replica(state, ObjectStore(backend), self.pec_name)

    def feed(self, envelopes: list[dict], answers: bool = False) -> None:
        """One micro-batch: each server's messages in arrival order, one step per server; then each
        queue manager's notifications; then the timers the watermark has passed."""
        by_server: dict[str, list[dict]] = {}
        by_qm: dict[str, list[dict]] = {}
        # Kafka offsets: the traffic's in the order given, the responder's answers (fed between the
        # traffic's micro-batches) apart, so the traffic's are the same however the batches fall
        numbers = self.answer_offsets if answers else self.offsets
        offset = {id(env): next(numbers) for env in envelopes}
        if self.tasks:                              # a new micro-batch: new tasks
            per_task = [FirstArrivals() for _ in range(self.tasks)]
            self.task_of = {server: self.rng.choice(per_task) for server in sorted(set(self.states) | {
                env["destination_machine"] for env in envelopes})}
        for env in sorted(envelopes, key=arrival_ms):
            self.max_event_ms = max(self.max_event_ms, arrival_ms(env))
            if env["protocol"].lower() == "mqdsrp":
                by_server.setdefault(env["destination_machine"], []).append(env)
            elif env["protocol"].lower() == "mqsd":
                self._discovery_check(env, offset[id(env)])
            elif env["protocol"].lower() == "mqcn":
                key = queue_manager_of(env["destination_queue"]) or env["destination_machine"]
                by_qm.setdefault(key, []).append(env)
        watermark = self.max_event_ms - self.watermark_delay_ms
        for server, envs in by_server.items():
            r = self.replica(server)
            for env, msg in _decodable("mqdsrp", envs):
                r.fire_timers_until(arrival_ms(env) - 1)          # as the job's operator does
                r.receive(msg, arrival_ms=arrival_ms(env), source=env["source_machine"],
                          message_class=env["message_class"], destination_queue=env["destination_queue"],
                          body=env["body"])
                r.inspect(authentication_level=env["authentication_level"], source=env["source_machine"],
                          arrival_ms=arrival_ms(env), where=evidence("msmq.dsrp.raw", 0, offset[id(env)],
                                                                     env["message_id"]),
                          message_class=env["message_class"])
            self._collect(r)
        self.fire_timers(watermark)
        for key, envs in by_qm.items():
            self.held.setdefault(key, []).extend(
                Row(arrival_ms(env), "mqcn", "msmq.cn.raw", 0, offset[id(env)], env["body"], env["message_id"],
                    env["sender_identifier_type"], env["authentication_level"], env["source_machine"],
                    env["destination_machine"], env["destination_queue"]) for env in envs)
        self.fire_qm_timers(watermark)

    def queue_manager(self, key: str) -> QueueManager:
        return QueueManager(self.qms.setdefault(key, QMState(key)), self.cn_settings)

    def _discovery_check(self, env: dict, offset: int) -> None:
        """A discovery reply's mqsd-rogue-reply check, as the job's discovery operator hands it on."""
        try:
            packet = decode("mqsd", env["body"])
        except WireError:
            return
        r = packet.server_reply
        if r is None:
            return
        reply = Reply(arrival_ms(env), env["source_machine"], r.directory_service_server_size,
                      [(e.ip_supported, e.ipx_supported, e.name) for e in r.directory_service_server_array or []],
                      list(r.connected_network_array), r.responding_site_id)
        check = reply_check(reply, env["destination_machine"],
                            evidence("msmq.sd.raw", 0, offset, env["message_id"]))
        self._to_registry(check.at_ms, check_text(check))

    def _to_registry(self, event_ms: int, text: str) -> None:
        self.registry_held.append(Row(event_ms, REGISTRY, None, None, None, text.encode(), None, None, None, None,
                                      None, None))

    def fire_qm_timers(self, watermark_ms: int) -> None:
        """Each queue manager takes what the clock has passed, in event-time order (as the job's
        operator does: streaming.operators.notification_input); so does the server registry."""
        self.registry, self.registry_held = advance_registry(self.registry, self.registry_held, watermark_ms)
        for _table, row in self.registry.findings.rows():
            self.tables.setdefault("security_findings", {})[tuple(row[c] for c in TABLES["security_findings"].key)] = row
        for key in sorted(set(self.qms) | set(self.held)):
            ready, self.held[key] = split(self.held.get(key, []), watermark_ms)
            qm, bad_rows, bad_pending = advance(lambda: self.queue_manager(key), ready, watermark_ms)
            assert not bad_rows and not bad_pending, (bad_rows, bad_pending)
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
                r.fire_timers_until(now_ms)
                self._collect(r)

    def _collect(self, r: Replica) -> None:
        r.store.flush()
        versions = []
        for table, row in step_rows(r, r.state.now_ms):
            if table == "directory_history":        # properties: its JSON text, as the sink stores it
                row = {**row, "properties": json.loads(row["properties"])}
                self.history.append(row)
            if table == REGISTRY:
                self._to_registry(row["event_ms"], row["text"])
            elif table != "object_versions":
                key = tuple(row[c] for c in TABLES[table].key)
                self.tables.setdefault(table, {})[key] = row
            else:                                   # what the job publishes for the MQCN operator
                versions.append(row)
            if table == "outbound_messages":
                self.outbound.append(row)
                self._answer(row)
        if r.name in self.task_of:
            passed = self.task_of[r.name].pre_select(versions)
            self.versions_dropped_in_tasks += len(versions) - len(passed)
            versions = passed
        for record in self.first_arrivals.select(versions) if self.first_arrivals else versions:
            self.versions_published += 1
            self.held.setdefault(record.owner, []).append(directory_row(json.loads(record.text),
                                                                        record.text.encode()))

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
            self.feed([env for _key, env in answers], answers=True)
        raise AssertionError("replicas kept asking after 50 rounds")

    def rows(self, table: str) -> list[dict]:
        return list(self.tables.get(table, {}).values())
