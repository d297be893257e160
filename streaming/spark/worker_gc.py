"""The Python workers' garbage collector, set for the operators' bulk work.

CPython collects its youngest generation every 700 net allocations. A micro-batch's bulk work
(unpickling a batching window's pending notifications, loading a replica's buckets, building a
step's rows) allocates millions of objects that live for the call: at that pace many survive a
young collection, are promoted, and set off full collections, each of which walks every object the
worker holds (pyspark, pandas and pyarrow included). Collecting the youngest generation every
50,000 allocations instead keeps what the collector finds, and removes most of that work:
unpickling 150,000 pending notifications took 0.81 s with the default and 0.24 s with this
(docs/benchmarks.md).
"""
import gc

__all__ = ["set_worker_gc", "YOUNG_THRESHOLD"]

YOUNG_THRESHOLD = 50_000


def set_worker_gc() -> None:
    """Raise the youngest generation's threshold in this process (idempotent; never lowers it)."""
    young, middle, old = gc.get_threshold()
    if young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
