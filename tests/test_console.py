"""The console shows what the job does (a line per query, --once's progress and summary),
Spark's own chatter goes to the log file, the producers show a bar on a terminal. The job itself on
a pseudo-terminal: tests/test_determinism.py (its --once run)."""
import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from streaming.apps.console import JobConsole

RAW_PROGRESS = {"input_rows": 1200, "duration_ms": 2000, "total_lag": 34, "dead_letters": 2}
OPERATOR_ROW = {"query_name": "dirstream-operators", "input_rows": 300, "duration_ms": 2000, "state_rows": 42,
                "late_rows": 3}
DEAD = [{"stage": None, "protocol": "mqcn", "error_structure": "ChangeNotification", "error_field": "Count"},
        {"stage": "operator:replication", "protocol": "mqdsrp", "error_reason": "TypeError: boom"}]


def fed(console: JobConsole) -> JobConsole:
    console.batch("dirstream", 0, RAW_PROGRESS, {"raw_messages_seen": 5, "dead_letters": 2}, DEAD)
    console.progress(OPERATOR_ROW)
    return console


def test_plain_lines_name_each_query_with_its_figures_and_the_summary_counts_what_was_written():
    err = io.StringIO()
    console = fed(JobConsole(io.StringIO(), err, fancy=False, once_total=2400))
    console.stop()
    text = err.getvalue()
    assert "progress job: 1 batches, 1,200 rows, 600 rows/s, lag 34, late 0, dead letters 2" in text
    assert "progress operators: 1 batches, 300 rows, 150 rows/s, state 42 rows, late 3, dead letters 0" in text
    assert "progress --once: 1,200 of 2,400 records" in text
    summary = console.summary()
    assert "rows written: 2 dead_letters, 5 raw_messages_seen" in summary
    assert "1 decode mqcn ChangeNotification.Count" in summary and "1 operator:replication mqdsrp: TypeError" in summary
    assert "late rows: 3" in summary


def test_on_a_terminal_a_live_table_shows_every_query_and_the_once_bar():
    err = io.StringIO()
    console = JobConsole(io.StringIO(), err, fancy=True, once_total=2400)
    console.start()
    fed(console)
    console.message(30, "Kafka at 127.0.0.1:1 does not answer")
    console.stop()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err.getvalue())
    for cell in ("query", "rows/s", "late rows", "dead letters", "job", "operators", "1,200", "records in Kafka at "
                 "the start", "WARNING Kafka at 127.0.0.1:1 does not answer"):
        assert cell in text, cell


def run_on_a_terminal(args: list[str], timeout: float = 300) -> str:
    """The command's output as a terminal shows it (a pseudo-terminal), ANSI sequences removed."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(args, stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True,
                            env={**os.environ, "COLUMNS": "140", "TERM": "xterm"})
    os.close(secondary)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 1.0)
        if ready:
            try:
                data = os.read(primary, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(300)
    os.close(primary)
    assert proc.returncode == 0, b"".join(chunks)[-3000:]
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "\n", b"".join(chunks).decode("utf-8", "replace"))


def test_the_simulator_shows_a_bar_on_a_terminal(broker, tmp_path):
    exe = str(Path(sys.executable).parent / "dirstream")
    text = run_on_a_terminal([exe, "produce", "simulate", "--bootstrap", broker, "--count", "3000",
                               "--rate", "3000"], timeout=600)
    assert "sending" in text and "/3000" in text and "msg/s" in text
    assert re.search(r'"published": \d+', text)                          # the JSON summary stays
