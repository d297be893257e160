"""The job's checkpoint folder through Hadoop's FileSystem API, as Spark reaches it.

The checkpoint may be a local folder or any Hadoop filesystem's URI (`hdfs://nn:8020/...`,
`s3a://bucket/...`): what the job keeps there beside Spark's own files (the query id that keys
the sink's exactly-once markers and the outbound message ids) is read and written with the same
filesystem and settings Spark uses, from the driver (py4j), so a driver started on another host or
from another working directory finds the same folder.
"""
import uuid

__all__ = ["CheckpointFolder"]

QUERY_ID_FILE = "dirstream-query-id"


class CheckpointFolder:
    def __init__(self, spark, location: str):
        self.location = location
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self._fs = self._path(location).getFileSystem(self._conf)

    def _path(self, *parts: str):
        path = self._jvm.org.apache.hadoop.fs.Path(self.location)
        for part in parts:
            path = self._jvm.org.apache.hadoop.fs.Path(path, part)
        return path

    def uri(self) -> str:
        """The folder's fully qualified URI (a relative local path against the working directory)."""
        return str(self._fs.makeQualified(self._path()).toUri().toString())

    def holds_folder(self, name: str) -> bool:
        path = self._path(name)
        return bool(self._fs.exists(path) and self._fs.getFileStatus(path).isDirectory())

    def read_text(self, name: str) -> str | None:
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            reader = self._jvm.java.io.BufferedReader(self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            return reader.readLine() or ""
        finally:
            stream.close()

    def write_text(self, name: str, text: str) -> None:
        """Written under another name and renamed: readers never see a part of it (HDFS's rename
        is atomic; an object store's PUT is whole whatever the rename)."""
        path, temporary = self._path(name), self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        self._fs.mkdirs(self._path())
        out = self._fs.create(temporary, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if not self._fs.rename(temporary, path):
            self._fs.delete(temporary, False)
            raise OSError(f"could not write {name} in the checkpoint {self.location}")

    def query_id(self) -> str:
        """A stable id for the query of this checkpoint: batch ids restart at 0 with a new checkpoint,
        so the sinks key their exactly-once markers by (query id, batch id)."""
        found = (self.read_text(QUERY_ID_FILE) or "").strip()
        if not found:
            self.write_text(QUERY_ID_FILE, str(uuid.uuid4()))
            found = (self.read_text(QUERY_ID_FILE) or "").strip()
        return found
