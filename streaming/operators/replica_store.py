"""Directory objects of one replica, kept in hash buckets (sans-IO).

A directory server can hold hundreds of thousands of objects. Reading and writing state once per
object costs a state-store round trip each, so objects live in buckets: a micro-batch loads each
bucket it touches once and writes it back once. The backend is a mapping bucket number -> bytes
(a dict in tests, Spark MapState in the job).

How many buckets: each round trip to the state store costs more than marshalling a few
hundred objects, and a micro-batch of a busy replica touches nearly every bucket, so the number of
buckets follows the directory: a power of two keeping about ENTRIES_PER_BUCKET entries per bucket,
doubled (every entry moved once) when the directory outgrows it. The layout (bucket count, entry
count, which buckets exist, so that a bucket is read without asking first whether it exists) is
part of the replica's state (StoreLayout in its ServerState). A state written before the layout
existed has 256 buckets and keeps them.
"""
import marshal
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

__all__ = ["bucket_of", "BucketBackend", "DictBackend", "DirObject", "ENTRIES_PER_BUCKET", "LEGACY_BUCKETS",
           "ObjectStore", "StoreLayout"]

LEGACY_BUCKETS = 256
ENTRIES_PER_BUCKET = 512


@dataclass(slots=True)
class DirObject:
    guid: str
    partition_id: str
    object_type: int
    path_name: str | None
    seq_number: int
    properties: dict[int, Any]

    # written out: mypyc compiles this one, not the one @dataclass generates (3.5 times as fast)
    def __init__(self, guid: str, partition_id: str, object_type: int, path_name: str | None, seq_number: int,
                 properties: dict[int, Any]) -> None:
        self.guid, self.partition_id, self.object_type, self.path_name = guid, partition_id, object_type, path_name
        self.seq_number, self.properties = seq_number, properties

    def __reduce__(self) -> tuple:
        """Copied and pickled through the constructor (see streaming.wire.properties.Property.__reduce__)."""
        return DirObject, self.to_tuple()

    def to_tuple(self) -> tuple:
        return (self.guid, self.partition_id, self.object_type, self.path_name, self.seq_number, self.properties)


def _frozen(obj: DirObject) -> DirObject:
    """A copy a later change of the same object (which updates it in place) does not alter."""
    return DirObject(obj.guid, obj.partition_id, obj.object_type, obj.path_name, obj.seq_number, dict(obj.properties))


@dataclass
class StoreLayout:
    """buckets: a power of two; entries (objects and path-index entries) and present (the buckets
    the backend holds) are None when unknown: a state written before layouts (256 buckets), which
    asks the backend instead and never resizes."""
    buckets: int = 1
    entries: int | None = 0
    present: set[int] | None = field(default_factory=set)

    def to_tuple(self) -> tuple:
        return (self.buckets, self.entries, sorted(self.present) if self.present is not None else None)

    @classmethod
    def from_tuple(cls, t) -> "StoreLayout":
        buckets, entries, present = t
        return cls(buckets, entries, set(present) if present is not None else None)

    @classmethod
    def legacy(cls) -> "StoreLayout":
        return cls(LEGACY_BUCKETS, None, None)


class BucketBackend(Protocol):
    def load(self, bucket: int) -> bytes | None: ...       # None: no such bucket

    def get(self, bucket: int) -> bytes: ...               # a bucket known to exist

    def save(self, bucket: int, data: bytes | None) -> None: ...

    def buckets(self) -> Iterator[int]: ...


class DictBackend:
    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}

    def load(self, bucket: int) -> bytes | None:
        return self.data.get(bucket)

    def get(self, bucket: int) -> bytes:
        return self.data[bucket]

    def save(self, bucket: int, data: bytes | None) -> None:
        if data is None:
            self.data.pop(bucket, None)
        else:
            self.data[bucket] = data

    def buckets(self) -> Iterator[int]:
        return iter(list(self.data))


def bucket_of(key: str, buckets: int = LEGACY_BUCKETS) -> int:
    return zlib.crc32(key.encode()) % buckets


class ObjectStore:
    """Objects by GUID plus a path-name index (3.1.5.2 changes may name an object by PathName)."""

    def __init__(self, backend: BucketBackend, layout: StoreLayout | None = None):
        self.backend = backend
        self.layout = layout if layout is not None else StoreLayout()   # the replica's (Replica attaches it)
        self._loaded: dict[int, dict[str, Any]] = {}
        self._dirty: set[int] = set()
        self.touched: dict[str, DirObject | None] = {}     # guid -> object after this batch (None: removed)
        self.removed: dict[str, DirObject] = {}            # guid -> object as it was when removed
        self.touched_at: dict[str, int] = {}               # guid -> event time of its last change
        self.versions: list[tuple[str, DirObject, bool, int, str]] = []
        self._last_version: dict[str, int] = {}      # guid -> index of its last entry in versions
        # every change of this batch, in order: (guid, object, removed, event time, kind: created,
        # modified or deleted); the MQCN operator reads the directory as of a time and
        # directory_history keeps every version, so no version may be folded into a later one
        self.clock_ms = 0                                  # set by the replica: the event being processed

    # ------------------------------------------------------------ buckets
    def _bucket(self, key: str, b: int | None = None) -> dict[str, Any]:
        b = bucket_of(key, self.layout.buckets) if b is None else b
        bucket = self._loaded.get(b)
        if bucket is None:
            bucket = self._loaded[b] = self._read(b)
        return bucket

    def _read(self, b: int) -> dict[str, Any]:
        present = self.layout.present
        if present is None:                 # a legacy layout: ask the backend
            raw = self.backend.load(b)
        else:
            raw = self.backend.get(b) if b in present else None
        return marshal.loads(raw) if raw else {}

    def _write(self, key: str, value) -> bool:
        """Store (or, value None, drop) one entry; True if the key was not there before."""
        b = bucket_of(key, self.layout.buckets)
        bucket = self._bucket(key, b)
        if value is None:
            had = bucket.pop(key, None) is not None
            change = -1 if had else 0
        else:
            change = 0 if key in bucket else 1
            bucket[key] = value
        if self.layout.entries is not None:
            self.layout.entries += change
        self._dirty.add(b)
        return change == 1

    def flush(self) -> None:
        """Write every changed bucket back to the backend (after doubling the buckets if the directory
        has outgrown them)."""
        layout = self.layout
        if layout.entries is not None and layout.present is not None:
            target = layout.buckets
            while layout.entries > ENTRIES_PER_BUCKET * target:
                target *= 2
            if target != layout.buckets:
                self._resize(target)
        for b in sorted(self._dirty):
            bucket = self._loaded[b]
            self.backend.save(b, marshal.dumps(bucket) if bucket else None)
            if layout.present is not None:
                (layout.present.add if bucket else layout.present.discard)(b)
        self._dirty.clear()

    def _resize(self, buckets: int) -> None:
        """Every entry into its bucket of the new count; every bucket written again (old ones left
        empty are removed)."""
        old = set(self.layout.present or ()) | set(self._loaded)
        entries: dict[str, Any] = {}
        for b in sorted(old):
            entries.update(self._loaded[b] if b in self._loaded else self._read(b))
        moved: dict[int, dict[str, Any]] = {b: {} for b in old}
        for key, value in entries.items():
            moved.setdefault(bucket_of(key, buckets), {})[key] = value
        self.layout.buckets = buckets
        self._loaded = moved
        self._dirty = set(moved)

    # ------------------------------------------------------------ objects
    def get(self, guid: str) -> DirObject | None:
        t = self._bucket(guid).get(guid)
        return DirObject(*t) if t is not None else None

    def put(self, obj: DirObject, index_path: bool = True) -> None:
        """Store an object; index_path=False when its path name is already indexed (an update)."""
        created = self._write(obj.guid, obj.to_tuple())
        if index_path and obj.path_name:
            self._write("path:" + obj.path_name.lower(), obj.guid)
        self.touched[obj.guid] = obj
        self.touched_at[obj.guid] = self.clock_ms
        self._record(obj, False, "created" if created else "modified")

    def remove(self, guid: str, seq_number: int | None = None) -> DirObject | None:
        """Remove an object; its removal is recorded with seq_number (the deletion's) when given."""
        obj = self.get(guid)
        if obj is None:
            return None
        if seq_number is not None:
            obj.seq_number = seq_number
        self._write(guid, None)
        if obj.path_name and self.guid_for_path(obj.path_name) == guid:
            self._write("path:" + obj.path_name.lower(), None)
        self.touched[guid] = None
        self.touched_at[guid] = self.clock_ms
        self.removed[guid] = obj
        self._record(obj, True, "deleted")
        return obj

    def guid_for_path(self, path_name: str) -> str | None:
        return self._bucket("path:" + path_name.lower()).get("path:" + path_name.lower())

    def all_objects(self) -> Iterator[DirObject]:
        """Every object (sync0 walks a whole partition; rare, so it may load every bucket)."""
        present = self.layout.present
        stored = self.backend.buckets() if present is None else present
        for b in sorted(set(stored) | set(self._loaded)):
            if b not in self._loaded:
                self._loaded[b] = self._read(b)
            for key, value in list(self._loaded[b].items()):
                if not key.startswith("path:"):
                    yield DirObject(*value)

    def take_changes(self) -> tuple[dict[str, DirObject | None], dict[str, DirObject], dict[str, int]]:
        touched, removed, at = self.touched, self.removed, self.touched_at
        self.touched, self.removed, self.touched_at = {}, {}, {}
        return touched, removed, at

    def _record(self, obj: DirObject, deleted: bool, kind: str) -> None:
        """A version of obj. One with the SeqNumber of the object's last live version, at the same
        instant of the same step, takes that version's place: no read can fall between the two (a
        change applied on a sync0-reset object, then the sync reply's full entry for it, found by the
        soak: two contents of one version at one instant, which reads could take either way)."""
        at = self._last_version.get(obj.guid)
        if at is not None and not deleted:
            _guid, before, before_deleted, ms, before_kind = self.versions[at]
            if not before_deleted and ms == self.clock_ms and before.seq_number == obj.seq_number:
                self.versions[at] = (obj.guid, _frozen(obj), False, ms, before_kind)
                return
        self._last_version[obj.guid] = len(self.versions)
        self.versions.append((obj.guid, _frozen(obj), deleted, self.clock_ms, kind))

    def take_versions(self) -> list[tuple[str, DirObject, bool, int, str]]:
        versions, self.versions, self._last_version = self.versions, [], {}
        return versions
