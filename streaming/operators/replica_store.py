"""Directory objects of one replica, kept in hash buckets (sans-IO).

A directory server can hold hundreds of thousands of objects. Reading and writing state once per
object costs a state-store round trip each, so objects live in a fixed number of buckets: a
micro-batch loads each bucket it touches once and writes it back once. The backend is a mapping
bucket number -> bytes (a dict in tests, Spark MapState in the job).
"""
import marshal
import zlib
from dataclasses import dataclass
from typing import Iterator, Protocol

BUCKETS = 256


@dataclass(slots=True)
class DirObject:
    guid: str
    partition_id: str
    object_type: int
    path_name: str | None
    seq_number: int
    properties: dict[int, object]

    def to_tuple(self) -> tuple:
        return (self.guid, self.partition_id, self.object_type, self.path_name, self.seq_number, self.properties)


def _frozen(obj: DirObject) -> DirObject:
    """A copy a later change of the same object (which updates it in place) does not alter."""
    return DirObject(obj.guid, obj.partition_id, obj.object_type, obj.path_name, obj.seq_number, dict(obj.properties))


class BucketBackend(Protocol):
    def load(self, bucket: int) -> bytes | None: ...

    def save(self, bucket: int, data: bytes | None) -> None: ...

    def buckets(self) -> Iterator[int]: ...


class DictBackend:
    def __init__(self):
        self.data: dict[int, bytes] = {}

    def load(self, bucket: int) -> bytes | None:
        return self.data.get(bucket)

    def save(self, bucket: int, data: bytes | None) -> None:
        if data is None:
            self.data.pop(bucket, None)
        else:
            self.data[bucket] = data

    def buckets(self) -> Iterator[int]:
        return iter(list(self.data))


def bucket_of(key: str) -> int:
    return zlib.crc32(key.encode()) % BUCKETS


class ObjectStore:
    """Objects by GUID plus a path-name index (3.1.5.2 changes may name an object by PathName)."""

    def __init__(self, backend: BucketBackend):
        self.backend = backend
        self._loaded: dict[int, dict[str, tuple]] = {}
        self._dirty: set[int] = set()
        self.touched: dict[str, DirObject | None] = {}     # guid -> object after this batch (None: removed)
        self.removed: dict[str, DirObject] = {}            # guid -> object as it was when removed
        self.touched_at: dict[str, int] = {}               # guid -> event time of its last change
        self.versions: list[tuple[str, DirObject, bool, int]] = []
        # every change of this batch, in order: (guid, object, removed, event time); the MQCN
        # operator reads the directory as of a time, so no version may be folded into a later one
        self.clock_ms = 0                                  # set by the replica: the event being processed

    # ------------------------------------------------------------ buckets
    def _bucket(self, key: str, b: int | None = None) -> dict[str, tuple]:
        b = bucket_of(key) if b is None else b
        bucket = self._loaded.get(b)
        if bucket is None:
            raw = self.backend.load(b)
            bucket = marshal.loads(raw) if raw else {}
            self._loaded[b] = bucket
        return bucket

    def _write(self, key: str, value) -> None:
        b = bucket_of(key)
        bucket = self._bucket(key, b)
        if value is None:
            bucket.pop(key, None)
        else:
            bucket[key] = value
        self._dirty.add(b)

    def flush(self) -> None:
        """Write every changed bucket back to the backend."""
        for b in sorted(self._dirty):
            bucket = self._loaded[b]
            self.backend.save(b, marshal.dumps(bucket) if bucket else None)
        self._dirty.clear()

    # ------------------------------------------------------------ objects
    def get(self, guid: str) -> DirObject | None:
        t = self._bucket(guid).get(guid)
        return DirObject(*t) if t is not None else None

    def put(self, obj: DirObject, index_path: bool = True) -> None:
        """Store an object; index_path=False when its path name is already indexed (an update)."""
        self._write(obj.guid, obj.to_tuple())
        if index_path and obj.path_name:
            self._write("path:" + obj.path_name.lower(), obj.guid)
        self.touched[obj.guid] = obj
        self.touched_at[obj.guid] = self.clock_ms
        self.versions.append((obj.guid, _frozen(obj), False, self.clock_ms))

    def remove(self, guid: str) -> DirObject | None:
        obj = self.get(guid)
        if obj is None:
            return None
        self._write(guid, None)
        if obj.path_name and self.guid_for_path(obj.path_name) == guid:
            self._write("path:" + obj.path_name.lower(), None)
        self.touched[guid] = None
        self.touched_at[guid] = self.clock_ms
        self.removed[guid] = obj
        self.versions.append((guid, _frozen(obj), True, self.clock_ms))
        return obj

    def guid_for_path(self, path_name: str) -> str | None:
        return self._bucket("path:" + path_name.lower()).get("path:" + path_name.lower())

    def all_objects(self) -> Iterator[DirObject]:
        """Every object (sync0 walks a whole partition; rare, so it may load every bucket)."""
        for b in sorted(set(self.backend.buckets()) | set(self._loaded)):
            if b not in self._loaded:
                raw = self.backend.load(b)
                self._loaded[b] = marshal.loads(raw) if raw else {}
            for key, value in list(self._loaded[b].items()):
                if not key.startswith("path:"):
                    yield DirObject(*value)

    def take_changes(self) -> tuple[dict[str, DirObject | None], dict[str, DirObject], dict[str, int]]:
        touched, removed, at = self.touched, self.removed, self.touched_at
        self.touched, self.removed, self.touched_at = {}, {}, {}
        return touched, removed, at

    def take_versions(self) -> list[tuple[str, DirObject, bool, int]]:
        versions, self.versions = self.versions, []
        return versions
