"""Drive the sans-IO replica with simulated traffic, without Spark or Kafka.

Messages are grouped by receiving server in arrival order, as the streaming operator sees them;
outbound messages can be answered by the authority responder's core and fed back, the way the
job and `dirstream produce respond` do it through Kafka. Rows are kept like the sink keeps
them: the last row per table key wins.
"""
from datetime import datetime

from producers.responder import Authorities
from streaming.envelope import make_envelope
from streaming.operators.replica_store import DictBackend, ObjectStore
from streaming.operators.replication import Replica, ServerState
from streaming.operators.replication_rows import step_rows
from streaming.sinks import TABLES
from streaming.wire import WireError, decode


def arrival_ms(envelope: dict) -> int:
    t = envelope["arrival_time"]
    return int(t.timestamp() * 1000) if isinstance(t, datetime) else int(t)


class OfflineJob:
    def __init__(self, truth: dict | None = None, pec_name: str | None = None):
        self.states: dict[str, tuple[ServerState, DictBackend]] = {}
        self.tables: dict[str, dict[tuple, dict]] = {}
        self.authorities = Authorities(truth) if truth else None
        self.pec_name = pec_name
        self.answers: list[tuple[str, dict]] = []
        self.outbound: list[dict] = []

    def replica(self, server: str) -> Replica:
        state, backend = self.states.setdefault(server, (ServerState(server), DictBackend()))
        return Replica(state, ObjectStore(backend), self.pec_name)

    def feed(self, envelopes: list[dict]) -> None:
        """One micro-batch: each server's messages in arrival order, one step per server."""
        by_server: dict[str, list[dict]] = {}
        for env in sorted(envelopes, key=arrival_ms):
            if env["protocol"].lower() == "mqdsrp":
                by_server.setdefault(env["destination_machine"], []).append(env)
        for server, envs in by_server.items():
            r = self.replica(server)
            for env in envs:
                try:
                    msg = decode("mqdsrp", env["body"])
                except WireError:
                    continue                       # a dead letter: never reaches the operator
                r.receive(msg, arrival_ms=arrival_ms(env), source=env["source_machine"],
                          message_class=env["message_class"], destination_queue=env["destination_queue"],
                          body=env["body"])
            self._collect(r)

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
