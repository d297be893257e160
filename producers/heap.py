"""The cyclic garbage collector in a process whose heap keeps growing: the simulator's directory and
ground truth, the authorities' partitions.

CPython's full collection scans every tracked object, and a busy process that allocates many
medium-lived objects (messages waiting for their reorder window, replies in flight) triggers one
every few tens of thousands of messages, so each message pays a share of a scan of the whole
directory. `FrozenSurvivors` moves what survives a full collection into the permanent generation
(gc.freeze), which later collections skip: a full collection then scans only what was made since.
Garbage cycles among frozen objects would never be found, so once the frozen objects have grown to
`growth` times what the last whole-heap collection left, they are unfrozen and the next full
collection scans everything again: the whole heap is scanned a logarithmic number of times, and
frozen garbage never holds more than the heap grew by since."""
from __future__ import annotations

import gc

__all__ = ["FrozenSurvivors"]


class FrozenSurvivors:
    """Installed as a gc callback while the process runs (install()/remove(), or as a context manager)."""

    def __init__(self, growth: float = 2.0, floor: int = 50_000):
        self.growth, self.floor = growth, floor
        self.whole_heap_collections = 0     # full collections that scanned every object
        self.young_collections = 0          # full collections that skipped the frozen objects
        self._left_by_whole_scan = 0
        self._whole_scan_next = False

    def install(self) -> "FrozenSurvivors":
        if self._after_collection not in gc.callbacks:
            gc.callbacks.append(self._after_collection)
        return self

    def remove(self) -> None:
        """Back to CPython's own collector: the frozen objects are scanned again from the next one."""
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)
        gc.unfreeze()

    def __enter__(self) -> "FrozenSurvivors":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()

    def _after_collection(self, phase: str, info: dict) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        if self._whole_scan_next:           # this collection scanned the whole heap
            self._whole_scan_next = False
            self.whole_heap_collections += 1
            gc.freeze()
            self._left_by_whole_scan = gc.get_freeze_count()
            return
        self.young_collections += 1
        if gc.get_freeze_count() > self.growth * max(self._left_by_whole_scan, self.floor):
            gc.unfreeze()                   # the next full collection finds the frozen garbage
            self._whole_scan_next = True
        else:
            gc.freeze()
