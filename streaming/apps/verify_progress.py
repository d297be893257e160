"""What `dirstream verify` shows while it works, on standard error: which check of how many, the
truth file read with a bar, each sink table as it is read, the time so far. On a terminal one
line is redrawn in place (and cleared before a check prints its results on standard output);
otherwise a plain line per step, and the truth's reading at most every PLAIN_EVERY_S."""
import re
import sys
import time

__all__ = ["VerifyProgress", "truth_reader"]

PLAIN_EVERY_S = 10.0
BAR_WIDTH = 30


def truth_reader(path: str):
    """A function (sections, progress) -> the truth's sections. A truth of the earlier format (one
    JSON object) is read once and kept; one of today's is read a check at a time, so that verify
    holds only the sections of the check it runs."""
    from producers.truth_file import is_whole_object, read_truth
    if not is_whole_object(path):
        return lambda sections, progress: read_truth(path, sections, progress)
    whole: dict = {}

    def read(sections, progress):
        if not whole:
            whole.update(read_truth(path, None, progress))
        return {k: v for k, v in whole.items() if k in sections}
    return read


class VerifyProgress:
    def __init__(self, checks, err=None):
        self.err = err or sys.stderr
        self.tty = self.err.isatty()
        self.checks = list(checks)
        self.started = time.monotonic()
        self.current = ""
        self._last_plain = 0.0
        self._shown = False

    def check(self, name: str) -> None:
        self.current = name
        self._show("reading the truth", force=True)

    def reading_truth(self, done: int, size: int) -> None:
        filled = BAR_WIDTH * done // max(size, 1)
        self._show(f"reading the truth [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                   f"{done / 1e6:,.0f} of {size / 1e6:,.0f} MB", force=done >= size)

    def table(self, sql: str) -> None:
        found = re.search(r"\bFROM\s+(\w+)", sql, re.IGNORECASE)
        self._show(f"reading {found.group(1) if found else 'the sink'}", force=True)

    def comparing(self) -> None:
        self._show("comparing", force=True)

    def done(self, name: str) -> None:
        self._clear()
        if not self.tty:
            print(f"verify: {name} checked, {self._elapsed()}", file=self.err, flush=True)

    def close(self) -> None:
        self._clear()

    def watching(self, sink):
        """The sink, each query of it shown as it starts."""
        return _WatchedSink(sink, self)

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.started:,.0f} s"

    def _show(self, step: str, force: bool = False) -> None:
        position = self.checks.index(self.current) + 1 if self.current in self.checks else 0
        text = f"verify: {self.current} ({position} of {len(self.checks)}): {step}, {self._elapsed()}"
        if self.tty:
            print(f"\r\x1b[2K{text}", end="", file=self.err, flush=True)
            self._shown = True
            return
        now = time.monotonic()
        if force or now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            print(text, file=self.err, flush=True)

    def _clear(self) -> None:
        if self.tty and self._shown:
            print("\r\x1b[2K", end="", file=self.err, flush=True)
            self._shown = False


class _WatchedSink:
    def __init__(self, sink, progress: VerifyProgress):
        self._sink, self._progress = sink, progress

    def query(self, sql: str, *args, **kwargs):
        self._progress.table(sql)
        rows = self._sink.query(sql, *args, **kwargs)
        self._progress.comparing()
        return rows

    def __getattr__(self, name):
        return getattr(self._sink, name)
