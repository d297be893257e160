"""The driver's sink write of a micro-batch, behind the next micro-batch.

foreachBatch collects a micro-batch's rows (Spark computes the batch meanwhile), and writing them to
the sink is the driver's alone: done inline, every Python worker waits for it. Written behind, the
rows are first made durable in a spool file, then foreachBatch returns (Spark commits the batch and
starts the next one) while a thread writes them in one sink transaction, idempotent by (query id,
batch id) as before.

Exactly once: a micro-batch's spool file is removed only after its sink transaction committed and
its outbound messages were published. A process killed at any moment leaves each batch in one of
these states, which a restart (`recover`, before the query starts) completes:
- not spooled: Spark has not committed it either, and runs it again;
- spooled, not committed by Spark: recovery writes it, then Spark runs it again and finds it
  written (the same rows: the tables are a pure function of Kafka);
- spooled and committed by Spark, not yet in the sink, or in the sink with its outbound messages
  not yet published: recovery writes it (or finds it written) and publishes them (at least once,
  as a batch that fails after its commit did before).
At most one write is in flight: the next micro-batch's rows wait for it before they are handed
over, so the spool holds at most two batches and a failed write stops the query at the next batch
(or, between batches, through WrittenQuery).

The spool is a folder of the checkpoint on a local filesystem (or one mounted at the same path on
every node). A checkpoint on another Hadoop filesystem (hdfs://, s3a://) gets no spool: the driver
writes inline, as before.
"""
import os
import pickle
import threading
from urllib.parse import urlparse

__all__ = ["local_spool_folder", "SPOOL_FOLDER", "WriteBehind", "WrittenQuery"]

SPOOL_FOLDER = "dirstream-write-behind"


def local_spool_folder(checkpoint: str) -> str | None:
    """The spool's folder for a checkpoint on the local filesystem (a path or a file: URI), else None."""
    parsed = urlparse(checkpoint)
    if parsed.scheme not in ("", "file"):
        return None
    return os.path.join(parsed.path if parsed.scheme else checkpoint, SPOOL_FOLDER)


class WriteBehind:
    """One thread writes each micro-batch's rows after they are spooled; one write at a time."""

    def __init__(self, folder: str):
        self.folder = folder
        self.failure: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- the spool
    def spooled(self) -> list[tuple[int, str]]:
        """(batch id, file) of every spooled batch, in batch order."""
        if not os.path.isdir(self.folder):
            return []
        found = [(int(name[:-len(".batch")]), os.path.join(self.folder, name))
                 for name in os.listdir(self.folder) if name.endswith(".batch") and name[:-len(".batch")].isdigit()]
        return sorted(found)

    def spool(self, batch_id: int, rows: dict) -> str:
        """The rows in a file of their own, durable (fsync'd, then renamed into place) before Spark may
        commit the batch."""
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"{batch_id:020d}.batch")
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "wb") as fh:
            pickle.dump(rows, fh, protocol=5)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
        _fsync_folder(self.folder)
        return path

    @staticmethod
    def load(path: str) -> dict:
        with open(path, "rb") as fh:
            return pickle.load(fh)

    # ---------------------------------------------------------------- the writing thread
    def start(self, write, path: str) -> None:
        """write() on the thread, after the write in flight; the spool file goes once it returned."""
        self.wait()

        def run() -> None:
            try:
                write()
                os.remove(path)
            except BaseException as exc:  # noqa: BLE001 -- kept and raised on the next micro-batch
                self.failure = exc
        self._thread = threading.Thread(target=run, name="dirstream-write-behind", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the write in flight is done; its failure is raised (and stays as .failure)."""
        self.drain()
        if self.failure is not None:
            raise self.failure

    def drain(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class WrittenQuery:
    """The StreamingQuery of a writer with a WriteBehind: stopping it, or waiting for it to end,
    also waits for the last micro-batch's write; a failed write ends it (isActive, exception())."""

    def __init__(self, query, behind: WriteBehind):
        self._query, self._behind = query, behind

    def __getattr__(self, name):
        return getattr(self._query, name)

    @property
    def isActive(self) -> bool:
        return self._query.isActive and self._behind.failure is None

    def exception(self):
        return self._query.exception() or self._behind.failure

    def stop(self) -> None:
        try:
            self._query.stop()
        finally:
            self._behind.drain()

    def awaitTermination(self, timeout=None):
        try:
            return self._query.awaitTermination() if timeout is None else self._query.awaitTermination(timeout)
        finally:
            if not self._query.isActive:
                self._behind.drain()
