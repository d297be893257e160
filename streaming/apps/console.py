"""What `dirstream run` shows the operator: one progress line per query, updated in place
on a terminal (rich) or printed as plain lines; warnings and errors stand out; with --once a
progress bar over the records that were in Kafka at the start, and a summary at the end.

Spark's and the Python workers' own output goes to the log file (`--log-file`): the job's process
points its file descriptors 1 and 2 there before Spark starts (`capture_output`), and the console
writes to copies of the terminal's descriptors.
"""
import logging
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["capture_output", "ConsoleHandler", "JobConsole", "PLAIN_EVERY_S", "QUERY_LABELS", "QueryLine",
           "RunTotals"]

QUERY_LABELS = {"dirstream": "job", "dirstream-operators": "operators"}
PLAIN_EVERY_S = 10.0


@dataclass
class QueryLine:
    batches: int = 0
    rows: int = 0
    busy_ms: int = 0                      # the micro-batches' durations added up

    @property
    def rows_per_second(self) -> float:
        return self.rows * 1000 / self.busy_ms if self.busy_ms else 0.0
    lag: int | None = None
    state_rows: int | None = None
    late_rows: int = 0
    dead_letters: int = 0

    def text(self) -> str:
        parts = [f"{self.batches} batches", f"{self.rows:,} rows", f"{self.rows_per_second:,.0f} rows/s"]
        if self.lag is not None:
            parts.append(f"lag {self.lag:,}")
        if self.state_rows is not None:
            parts.append(f"state {self.state_rows:,} rows")
        parts += [f"late {self.late_rows:,}", f"dead letters {self.dead_letters:,}"]
        return ", ".join(parts)


@dataclass
class RunTotals:
    written: Counter = field(default_factory=Counter)          # table -> rows written
    dead_reasons: Counter = field(default_factory=Counter)     # reason -> dead letters
    late_rows: int = 0


def capture_output(log_file: str) -> tuple:
    """Points fds 1 and 2 at the log file (Spark's JVM and Python workers inherit them) and returns
    (stdout, stderr) files on copies of the original descriptors, for the console."""
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    err = os.fdopen(os.dup(2), "w", buffering=1)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return out, err


class JobConsole:
    """The observer the queries report to (streaming.spark.pipeline calls batch(), the progress
    listener progress()), and the logging handler for warnings and errors."""

    def __init__(self, out, err, fancy: bool, once_total: int | None = None):
        self.out, self.err, self.fancy = out, err, fancy
        self.once_total = once_total
        self.lines: dict[str, QueryLine] = {}
        self.totals = RunTotals()
        self.raw_done = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._live = None
        self._last_plain = 0.0
        self._stopped = False

    # ------------------------------------------------------------ what the queries report
    def batch(self, query: str, batch_id: int, progress: dict | None, written: dict, dead: list) -> None:
        with self._lock:
            line = self.lines.setdefault(query, QueryLine())
            for table, n in written.items():
                self.totals.written[table] += n
            for d in dead:
                self.totals.dead_reasons[_reason(d)] += 1
            if progress is not None:              # the raw query's own progress row
                line.batches += 1
                line.rows += progress["input_rows"]
                line.busy_ms += progress.get("duration_ms") or 0
                line.lag = progress.get("total_lag")
                line.dead_letters += progress["dead_letters"]
                self.raw_done += progress["input_rows"]
            else:
                line.dead_letters += len(dead)
        self._changed()

    def progress(self, row: dict) -> None:
        """An operator query's micro-batch, from Spark's progress."""
        with self._lock:
            line = self.lines.setdefault(row["query_name"], QueryLine())
            line.batches += 1
            line.rows += row["input_rows"]
            line.busy_ms += row.get("duration_ms") or 0
            line.state_rows = row["state_rows"]
            line.late_rows += row["late_rows"]
            self.totals.late_rows += row["late_rows"]
        self._changed()

    # ------------------------------------------------------------ display
    def start(self) -> None:
        if self.fancy:
            from rich.console import Console
            from rich.live import Live
            self._live = Live(get_renderable=self._renderable, console=Console(file=self.err, force_terminal=True),
                              refresh_per_second=2, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._live is not None:
            self._live.stop()
            self._live = None
        else:
            self._plain(force=True)

    def message(self, level: int, text: str) -> None:
        """A warning or an error: above the live display on a terminal, a marked line otherwise."""
        if self._live is not None:
            style = "bold red" if level >= logging.ERROR else "yellow"
            self._live.console.print(f"[{style}]{logging.getLevelName(level)}[/{style}] {_escape(text)}")
        else:
            print(f"{logging.getLevelName(level)}: {text}", file=self.err, flush=True)

    def notice(self, text: str) -> None:
        """A line the operator must see in both modes (stopping, a failure)."""
        if self._live is not None:
            self._live.console.print(_escape(text))
        else:
            print(text, file=self.err, flush=True)

    def info(self, text: str) -> None:
        """A line of the job's own (a batch written, stopped cleanly): plain output only."""
        if self._live is None:
            print(text, file=self.err, flush=True)

    def summary(self) -> str:
        t = self.totals
        lines = [f"dirstream run: finished in {time.monotonic() - self.started:,.1f} s"]
        written = ", ".join(f"{n:,} {table}" for table, n in sorted(t.written.items()) if n)
        lines.append(f"  rows written: {written or 'none'}")
        if t.dead_reasons:
            lines.append("  dead letters: " + "; ".join(f"{n:,} {reason}" for reason, n in t.dead_reasons.most_common()))
        else:
            lines.append("  dead letters: none")
        lines.append(f"  late rows: {t.late_rows:,}")
        return "\n".join(lines)

    def _changed(self) -> None:
        if self._live is None:
            self._plain()

    def _plain(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_plain < PLAIN_EVERY_S:
            return
        self._last_plain = now
        with self._lock:
            for query, line in sorted(self.lines.items()):
                print(f"progress {QUERY_LABELS.get(query, query)}: {line.text()}", file=self.err, flush=True)
            if self.once_total:
                print(f"progress --once: {self.raw_done:,} of {self.once_total:,} records", file=self.err, flush=True)

    def _renderable(self):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        table = Table(box=None, show_header=True, header_style="bold")
        for name in ("query", "batches", "rows", "rows/s", "lag", "state rows", "late rows", "dead letters"):
            table.add_column(name, justify="left" if name == "query" else "right")
        with self._lock:
            for query, line in sorted(self.lines.items()):
                table.add_row(QUERY_LABELS.get(query, query), f"{line.batches:,}", f"{line.rows:,}",
                              f"{line.rows_per_second:,.0f}", "" if line.lag is None else f"{line.lag:,}",
                              "" if line.state_rows is None else f"{line.state_rows:,}",
                              f"{line.late_rows:,}", f"{line.dead_letters:,}")
            done, total = self.raw_done, self.once_total
        if not total:
            return table
        elapsed = time.monotonic() - self.started
        eta = (total - done) * elapsed / done if done else None
        caption = (f"--once: {done:,} of {total:,} records in Kafka at the start"
                   + (f", about {eta:,.0f} s to go" if eta is not None and done < total else ""))
        return Group(table, caption, ProgressBar(total=total, completed=min(done, total), width=60))


class ConsoleHandler(logging.Handler):
    """Warnings and errors of the job's own loggers to the console."""

    def __init__(self, console: JobConsole):
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.message(record.levelno, record.getMessage())
        except Exception:          # noqa: BLE001 -- logging must never fail the job
            self.handleError(record)


def _reason(dead: dict) -> str:
    stage = dead.get("stage") or "decode"
    where = ".".join(p for p in (dead.get("error_structure"), dead.get("error_field")) if p)
    return f"{stage} {dead.get('protocol') or ''} {where}".strip() if where else \
        f"{stage} {dead.get('protocol') or ''}: {(dead.get('error_reason') or dead.get('error') or '')[:60]}".strip()


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)
