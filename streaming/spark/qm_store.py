"""A queue manager's state in the state store in parts, so that a micro-batch's state calls send what
it changed, not what the queue manager holds: up to 15 minutes of pending notifications with
their bodies (MQCN 3.3.5 batching), 30 minutes of message ids ([MS-MQQB] 3.1.5.8.1), the rows
waiting for the watermark, and the directory as the replicas show it (every object the queue manager
may read, which grows with the enterprise). On the wall clock the windows hold minutes of traffic;
written whole, every micro-batch sent all of it again.

    qm_core    ValueState: the queue manager's state but those four, and where their parts are
               (small: written on every call)
    qm_directory  MapState object GUID -> its versions (pickled): read as the queue manager looks
               an object up (all of them only for a refresh), written when they changed
    qm_parts   MapState part number -> bytes, one of:
               - pending notifications (pickled): a part per micro-batch that added some, read only when
                 something iterates them (the batching timer fires) and dropped with them; past the
                 refresh threshold of a window, what its refresh records of each (about 110 bytes
                 against 500 for the message with its body);
               - rows waiting for the watermark (pickled): a part per micro-batch with its earliest event
                 time, read only once the watermark has passed one of its rows (these two kinds
                 compressed: pack_part);
               - message ids seen in one minute of event time (a part per micro-batch and minute,
                 merged into one once the watermark has passed the minute): each id as a 64-bit
                 hash with its last arrival and copies, in sorted arrays looked up in place
                 (a copy can come any time within 30 minutes: every call reads them, none is
                 unpacked); dropped once the watermark is 30 minutes past their minute.

A message id kept as a 64-bit hash (BLAKE2b): two ids of a queue manager's 30 minutes sharing one
is a chance of about n^2 / 2^65, below 1 in 10^8 for a million ids, and would take a message for a
copy of the other.

A state stored whole by earlier versions (the value state `queue_manager`: the pickled state and
the waiting rows) is read once and written in parts.
"""
import bisect
import dataclasses
import hashlib
import pickle
import struct
import zlib
from array import array

from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from ..operators.notification_input import Row, order, split
from ..operators.notifications import MESSAGE_ID_HISTORY_MS, MINUTE, MessageIdHistory, QMState

__all__ = ["encode_ids", "IdPart", "Layout", "LazyDirectory", "LazyPending", "load_part", "message_hash", "pack_part",
           "QueueManagerStore", "StoredHistory", "StoredQueueManager"]

_BINARY = StructType([StructField("data", BinaryType())])
_PART = StructType([StructField("part", LongType())])
_GUID = StructType([StructField("guid", StringType())])


def _dump(value) -> bytes:
    return pickle.dumps(value, protocol=5)


def pack_part(rows: list) -> bytes:
    """A part of waiting rows or pending notifications, pickled and compressed (zlib, level 1): the
    directory versions among the waiting rows are JSON text, largely each replica's copy of the same
    object, which compresses about 16 times at about 2 ns a byte each way."""
    return zlib.compress(_dump(rows), 1)


def load_part(data: bytes) -> list:
    """A part as pack_part wrote it, or pickled alone as earlier versions wrote it (a pickle of
    protocol 2 or later starts with 0x80; a zlib stream of the default window with 0x78)."""
    return pickle.loads(zlib.decompress(data) if data[:1] == b"\x78" else data)


class LazyPending:
    """The pending notifications as the queue manager uses them (append, iterate, len): the stored
    parts are read only when iterated; what this call appended is kept apart."""

    def __init__(self, parts: list[int], count: int, read_part):
        self.parts, self.count, self.read_part = parts, count, read_part
        self.stored: list | None = None if parts else []
        self.appended: list = []

    def _all(self) -> list:
        if self.stored is None:
            self.stored = [n for part in self.parts for n in self.read_part(part)]
        return self.stored + self.appended

    def append(self, notification) -> None:
        self.appended.append(notification)

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return self.count + len(self.appended)

    def __bool__(self) -> bool:
        return len(self) > 0


class LazyDirectory(dict):
    """A queue manager's directory (object GUID -> its versions) read from qm_directory one object at
    a time, as the queue manager looks objects up: a micro-batch reads the objects its rows name, and
    only iterating (a refresh of every queue) reads them all. `changed()` gives what to write back."""

    def __init__(self, stored, inherited: dict | None = None):
        super().__init__()
        self.stored = stored                                # the MapState: guid -> pickled versions
        self.read: dict[str, bytes | None] = {}             # each object read, as stored (None: not stored)
        self.whole = False
        # the objects handed out for changing (setdefault, []): only those can need writing back
        self.touched: set[str] = set()
        for guid, versions in (inherited or {}).items():    # an earlier layout's, from the core: written
            dict.__setitem__(self, guid, versions)
            self.read[guid] = None
            self.touched.add(guid)

    def _load(self, guid: str) -> None:
        if guid not in self.read and not self.whole:
            value = self.stored.getValue((guid,))
            self.read[guid] = data = bytes(value[0]) if value is not None else None
            if data is not None:
                dict.__setitem__(self, guid, pickle.loads(data))

    def _load_all(self) -> None:
        if not self.whole:
            for (guid,), (value,) in self.stored.iterator():
                if guid not in self.read:
                    self.read[guid] = data = bytes(value)
                    dict.__setitem__(self, guid, pickle.loads(data))
            self.whole = True

    def get(self, guid, default=None):
        self._load(guid)
        return dict.get(self, guid, default)

    def setdefault(self, guid, default=None):
        self._load(guid)
        self.touched.add(guid)
        return dict.setdefault(self, guid, default)

    def __getitem__(self, guid):
        self._load(guid)
        self.touched.add(guid)
        return dict.__getitem__(self, guid)

    def __contains__(self, guid) -> bool:
        self._load(guid)
        return dict.__contains__(self, guid)

    def __iter__(self):
        self._load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load_all()
        return dict.__len__(self)

    def keys(self):
        self._load_all()
        return dict.keys(self)

    def values(self):
        self._load_all()
        return dict.values(self)

    def items(self):
        self._load_all()
        return dict.items(self)

    def changed(self) -> list[tuple[str, bytes]]:
        """(guid, pickled versions) of each object added or changed since read (of those handed out
        for changing: get, `in` and iterating only read)."""
        out = []
        for guid in sorted(self.touched):
            if dict.__contains__(self, guid):
                data = _dump(dict.__getitem__(self, guid))
                if data != self.read.get(guid):
                    out.append((guid, data))
        return out


def message_hash(message_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(message_id.encode(), digest_size=8).digest(), "little")


def encode_ids(entries: dict[int, tuple[int, int]]) -> bytes:
    """{hash: (last arrival ms, copies)} as one part: the count, then the sorted hashes, the arrival
    times and the copies as arrays."""
    hashes = sorted(entries)
    times = array("q", [entries[h][0] for h in hashes])
    copies = array("I", [entries[h][1] for h in hashes])
    return struct.pack("<I", len(hashes)) + array("Q", hashes).tobytes() + times.tobytes() + copies.tobytes()


class IdPart:
    """A part of message ids, looked up in place (binary search over the hashes)."""

    def __init__(self, data: bytes):
        view = memoryview(data)
        n = struct.unpack_from("<I", view)[0]
        self.hashes = view[4:4 + 8 * n].cast("Q")
        self.times = view[4 + 8 * n:4 + 16 * n].cast("q")
        self.copies = view[4 + 16 * n:4 + 20 * n].cast("I")

    def get(self, h: int) -> tuple[int, int] | None:
        i = bisect.bisect_left(self.hashes, h)
        if i < len(self.hashes) and self.hashes[i] == h:
            return self.times[i], self.copies[i]
        return None

    def entries(self) -> dict[int, tuple[int, int]]:
        return {h: (t, c) for h, t, c in zip(self.hashes, self.times, self.copies)}


class StoredHistory:
    """[MS-MQQB] 3.1.5.8.1 MessageIDHistoryTable over the stored parts (newest first) and what this
    call saw (`seen`, written on save): an entry last seen more than MESSAGE_ID_HISTORY_MS before an
    arrival is forgotten (3.1.6.7), as the in-memory table forgets it before each look."""

    def __init__(self, parts: list[IdPart]):
        self.parts = parts
        self.seen: dict[int, tuple[int, int]] = {}

    def renew(self, message_id: str, arrival_ms: int) -> int:
        h = message_hash(message_id)
        last = self.seen.get(h)
        if last is None:
            last = next((e for e in (part.get(h) for part in reversed(self.parts)) if e is not None), None)
        copies = last[1] + 1 if last is not None and last[0] >= arrival_ms - MESSAGE_ID_HISTORY_MS else 0
        self.seen[h] = (arrival_ms, copies)
        return copies


@dataclasses.dataclass
class Layout:
    """Where a queue manager's parts are (kept in qm_core)."""
    next_part: int = 0
    pending: list = dataclasses.field(default_factory=list)        # part numbers, in order
    pending_count: int = 0
    held: list = dataclasses.field(default_factory=list)           # [part number, earliest event_ms]
    ids: list = dataclasses.field(default_factory=list)            # [minute start ms, part number], in order

    def new_part(self) -> int:
        self.next_part += 1
        return self.next_part - 1


class StoredQueueManager:
    """One key's stored state as read for one call: the core, the layout, and the parts read."""

    def __init__(self, store: "QueueManagerStore", core: bytes | None, layout: Layout, held: list[Row],
                 whole: bytes | None = None):
        self.store, self.core, self.layout, self.held, self.whole = store, core, layout, held, whole
        self.held_parts: dict[int, list[Row]] = {}    # stored parts of waiting rows read: what still waits
        self._ids: dict[int, bytes] = {}
        self._parts: dict[int, bytes] = {}
        self.pending: LazyPending | None = None
        self.history: StoredHistory | MessageIdHistory | None = None

    def queue_manager_parts(self, key: str) -> tuple[QMState, StoredHistory | MessageIdHistory]:
        """A fresh QMState and message id history (a poison message makes the caller load again):
        the pending notifications read lazily, the ids looked up in their parts."""
        if self.whole is not None:                  # an earlier version's state: migrated on save
            st = pickle.loads(self.whole) if self.whole else QMState(key)
            self.history = MessageIdHistory(st.message_ids)
            return st, self.history
        st = pickle.loads(self.core) if self.core is not None else QMState(key)
        st.directory = LazyDirectory(self.store.directory, st.directory)
        self.history = StoredHistory([IdPart(self._read(part, self._ids)) for _minute, part in self.layout.ids])
        self.pending = st.pending = LazyPending(list(self.layout.pending), self.layout.pending_count,
                                                lambda part: load_part(self._read(part, self._parts)))
        return st, self.history

    def _read(self, part: int, cache: dict) -> bytes:
        if part not in cache:
            cache[part] = self.store.read_part(part)
        return cache[part]


class QueueManagerStore:
    """The queue managers' state variables on the operator's handle, and reading and writing one key."""

    def __init__(self, handle, whole_state):
        self.core = handle.getValueState("qm_core", _BINARY)
        self.parts = handle.getMapState("qm_parts", _PART, _BINARY)
        self.directory = handle.getMapState("qm_directory", _GUID, _BINARY)
        self.whole_state = whole_state              # the value state of earlier versions

    def read_part(self, part: int) -> bytes:
        value = self.parts.getValue((part,))
        return bytes(value[0]) if value is not None else pack_part([])

    def load(self, key: str, watermark_ms: int, incoming: list[Row]) -> tuple[StoredQueueManager, list[Row]]:
        """The key's stored state, and the rows the watermark has passed (stored and incoming) in the
        order they apply in. The waiting rows are in the returned state's `held`."""
        stored = self.core.get()
        if stored is None:
            whole = self.whole_state.get()
            if whole is not None:                   # stored whole by an earlier version
                st, held = pickle.loads(bytes(whole[0]))
                ready, waiting = split([Row(*r) for r in held] + incoming, watermark_ms)
                return StoredQueueManager(self, None, Layout(), waiting, whole=st or b""), ready
            ready, waiting = split(incoming, watermark_ms)
            return StoredQueueManager(self, None, Layout(), waiting), ready
        core, fields = pickle.loads(bytes(stored[0]))
        layout = Layout(**fields)
        loaded = StoredQueueManager(self, core, layout, [])
        ready = []
        for part, earliest in layout.held:
            if earliest <= watermark_ms:            # some of its rows are due: the rest written back on save
                passed, loaded.held_parts[part] = split([Row(*r) for r in load_part(self.read_part(part))],
                                                        watermark_ms)
                ready += passed
        passed, loaded.held = split(incoming, watermark_ms)     # this call's own waiting rows: a new part
        return loaded, sorted(ready + passed, key=order)

    def save(self, loaded: StoredQueueManager, st: QMState, watermark_ms: int) -> int | None:
        """Writes what changed; returns the earliest event time of the rows still waiting (None: none)."""
        layout = loaded.layout
        kept = []
        for part, earliest in layout.held:
            waiting = loaded.held_parts.get(part)
            if waiting is None:
                kept.append([part, earliest])
            elif waiting:
                self.parts.updateValue((part,), (pack_part([tuple(r) for r in waiting]),))
                kept.append([part, min(r.event_ms for r in waiting)])
            else:
                self.parts.removeKey((part,))
        layout.held = kept
        if loaded.held:
            part = layout.new_part()
            self.parts.updateValue((part,), (pack_part([tuple(r) for r in loaded.held]),))
            layout.held.append([part, min(r.event_ms for r in loaded.held)])
        self._save_pending(layout, st.pending, loaded.pending)
        self._save_ids(loaded, watermark_ms)
        self._save_directory(st.directory)
        core = _dump(dataclasses.replace(st, pending=[], message_ids={}, directory={}))
        self.core.update((_dump((core, dataclasses.asdict(layout))),))
        if loaded.whole is not None:
            self.whole_state.clear()
        return min((earliest for _part, earliest in layout.held), default=None)

    def _save_directory(self, directory: dict) -> None:
        if isinstance(directory, LazyDirectory):
            changed = directory.changed()
        else:                                       # a state stored whole: every object
            changed = [(guid, _dump(versions)) for guid, versions in directory.items()]
        for guid, data in changed:
            self.directory.updateValue((guid,), (data,))

    def _save_pending(self, layout: Layout, pending, lazy: LazyPending | None) -> None:
        if lazy is not None and pending is lazy:
            added = lazy.appended                   # only appended to: a part of its own
        else:                                       # replaced (a timer fired): written again whole
            for part in layout.pending:
                self.parts.removeKey((part,))
            layout.pending, layout.pending_count = [], 0
            added = list(pending)
        if added:
            part = layout.new_part()
            self.parts.updateValue((part,), (pack_part(added),))
            layout.pending.append(part)
            layout.pending_count += len(added)

    def _save_ids(self, loaded: StoredQueueManager, watermark_ms: int) -> None:
        layout, written, history = loaded.layout, loaded._ids, loaded.history
        if isinstance(history, StoredHistory):
            seen = history.seen
        else:                                       # a state stored whole: its table, hashed
            seen = {message_hash(message_id): entry for message_id, entry in history.ids.items()}
        by_minute: dict[int, dict] = {}
        for h, entry in seen.items():
            by_minute.setdefault(entry[0] - entry[0] % MINUTE, {})[h] = entry
        for minute, entries in sorted(by_minute.items()):
            part = layout.new_part()
            written[part] = encode_ids(entries)
            self.parts.updateValue((part,), (written[part],))
            layout.ids.append([minute, part])
        # a minute whose ids are all older than any later arrival's history reaches: forgotten
        horizon = watermark_ms - MESSAGE_ID_HISTORY_MS
        for minute, part in [m for m in layout.ids if m[0] + MINUTE <= horizon]:
            self.parts.removeKey((part,))
        layout.ids = [m for m in layout.ids if m[0] + MINUTE > horizon]
        self._merge_past_minutes(layout, written, watermark_ms)

    def _merge_past_minutes(self, layout: Layout, written: dict, watermark_ms: int) -> None:
        """A minute the watermark has passed gets no more ids: its parts (one per micro-batch) become
        one, so that a call reads a part per minute, not one per micro-batch of the last 30 minutes."""
        parts_of: dict[int, list[int]] = {}
        for minute, part in layout.ids:
            parts_of.setdefault(minute, []).append(part)
        for minute, parts in parts_of.items():
            if minute + MINUTE > watermark_ms or len(parts) == 1:
                continue
            merged: dict = {}
            for part in parts:                      # in the order written: a later entry is a renewal
                merged.update(IdPart(written[part] if part in written else self.read_part(part)).entries())
            written[parts[0]] = encode_ids(merged)
            self.parts.updateValue((parts[0],), (written[parts[0]],))
            for part in parts[1:]:
                self.parts.removeKey((part,))
            at = layout.ids.index([minute, parts[0]])
            layout.ids = [m for m in layout.ids if m[0] != minute]
            layout.ids.insert(at, [minute, parts[0]])
