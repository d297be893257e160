"""What the job's stateful operators did, counted for the benchmark: every round trip to the JVM's
state server (by the pyspark function that made it) and the bytes they sent, the keys and timers
handled, and the rows that came in and went out; and the driver's: the parameter rows of the sink's
statements, by table (SINK_WRITER). Off unless DIRSTREAM_OPERATOR_COUNTS names a
folder; each Python worker then appends one JSON line per operator and task to <folder>/<pid>.jsonl
when the task ends (with the time it ended, `at`).

Counting wraps the task's StatefulProcessorApiClient._send_proto_message (every state call, timer
call and implicit-key change pyspark makes sends exactly one message and waits for its answer),
so it counts Spark's own calls (setting the key, listing expired timers) beside the operators'."""
import json
import os
import sys
import time
from collections import Counter

__all__ = ["append_counts", "counting_folder", "COUNTS_ENV", "OperatorCounts", "read_counts", "SINK_WRITER",
           "start_counting", "task_balance", "task_identity"]

COUNTS_ENV = "DIRSTREAM_OPERATOR_COUNTS"
SINK_WRITER = "sink writer"


def counting_folder() -> str | None:
    return os.environ.get(COUNTS_ENV) or None


class OperatorCounts:
    """The counts of one operator in one task; written by flush()."""

    def __init__(self, operator: str, handle, folder: str):
        self.operator, self.folder = operator, folder
        self.calls: Counter = Counter()
        self.figures: Counter = Counter()
        self.task = task_identity()
        client = handle._statefulProcessorApiClient
        send = client._send_proto_message

        def counted(message: bytes) -> None:
            self.calls[sys._getframe(1).f_code.co_qualname] += 1
            self.figures["bytes to the state server"] += len(message)
            send(message)
        client._send_proto_message = counted

    def wrap(self, processor) -> None:
        """Counts the processor's keys, timers and rows: its two handlers replaced on the instance."""
        cls = type(processor)               # the class's: a processor initialised again is wrapped once
        rows_handler = cls.handleInputRows.__get__(processor)
        timer_handler = cls.handleExpiredTimer.__get__(processor)

        def handle_input_rows(key, rows, timerValues):          # noqa: N803 -- Spark passes them by name
            self.figures["keys"] += 1
            yield from self._out(rows_handler(key, self._counted_in(rows), timerValues))

        def handle_expired_timer(key, timerValues, expiredTimerInfo):     # noqa: N803
            self.figures["timers fired"] += 1
            yield from self._out(timer_handler(key, timerValues, expiredTimerInfo))
        processor.handleInputRows, processor.handleExpiredTimer = handle_input_rows, handle_expired_timer

    def _counted_in(self, frames):
        for frame in frames:
            self.figures["rows in"] += len(frame)
            yield frame

    def _out(self, frames):
        for frame in frames:
            self.figures["rows out"] += len(frame)
            self.figures["frames out"] += 1
            yield frame

    def flush(self) -> None:
        append_counts(self.folder, self.operator, dict(self.figures), dict(self.calls), self.task)
        self.calls.clear()
        self.figures.clear()


def task_identity() -> dict:
    """The micro-batch and the shuffle partition of the Spark task this runs in ({} outside a task):
    what tells the operator's tasks of one micro-batch apart, to weigh their shares of its rows."""
    from pyspark import TaskContext
    context = TaskContext.get()
    if context is None:
        return {}
    return {"batch": context.getLocalProperty("streaming.sql.batchId"), "stage": context.stageId(),
            "partition": context.partitionId()}


def append_counts(folder: str, operator: str, figures: dict, calls: dict | None = None,
                  task: dict | None = None) -> None:
    """One line of counts (an operator's task, the driver's sink writes) in this process's file."""
    line = {"operator": operator, "pid": os.getpid(), "at": time.time(), "calls": calls or {}, "task": task or {},
            **figures}
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as fh:
        fh.write(json.dumps(line) + "\n")


def start_counting(operator: str, processor, handle) -> OperatorCounts | None:
    """In a processor's init: counts it if the benchmark asked for counts (else None, and nothing
    is wrapped)."""
    folder = counting_folder()
    if folder is None:
        return None
    counts = OperatorCounts(operator, handle, folder)
    counts.wrap(processor)
    return counts


def read_counts(folder: str) -> dict[str, dict]:
    """Every worker's lines summed by operator: {operator: {"calls": Counter, figure: n, "task_rows":
    [(batch, stage, partition, rows in) of each task]}}."""
    out: dict[str, dict] = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        with open(os.path.join(folder, name)) as fh:
            for text in fh:
                line = json.loads(text)
                mine = out.setdefault(line.pop("operator"), {"calls": Counter(), "tasks": 0, "task_rows": []})
                line.pop("pid")
                line.pop("at", None)
                mine["calls"].update(line.pop("calls"))
                mine["tasks"] += 1
                task = line.pop("task", None)
                if task:
                    mine["task_rows"].append((task["batch"], task["stage"], task["partition"], line.get("rows in", 0)))
                for figure, n in line.items():
                    mine[figure] = mine.get(figure, 0) + n
    return out


def task_balance(task_rows: list[tuple], partitions: int = 1) -> dict | None:
    """How evenly an operator's micro-batches spread their rows over its tasks: each micro-batch's
    largest task against the mean over its `partitions` (the shuffle partitions: one that got no
    rows counts as a task with none), weighted by the micro-batch's rows; and the worst micro-batch.
    None when no task said which micro-batch it ran in."""
    stages: dict[tuple, dict[int, int]] = {}
    for batch, stage, partition, rows in task_rows:
        tasks = stages.setdefault((batch, stage), {})
        tasks[partition] = tasks.get(partition, 0) + rows
    weighted = total = 0.0
    worst = None
    for (batch, _stage), tasks in sorted(stages.items(), key=lambda kv: str(kv[0])):
        rows = sum(tasks.values())
        if not rows:
            continue
        ratio = max(tasks.values()) / (rows / max(len(tasks), partitions))
        weighted, total = weighted + ratio * rows, total + rows
        if worst is None or ratio > worst[1]:
            worst = (batch, ratio, sorted(tasks.values(), reverse=True) + [0] * (partitions - len(tasks)))
    if not total:
        return None
    return {"largest_to_mean": weighted / total, "worst_batch": worst[0], "worst_ratio": worst[1],
            "worst_rows": worst[2]}
