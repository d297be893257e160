"""The Python workers' garbage collector: each operator's processor and the Kafka source's reading
task raise the youngest generation's threshold in the process they run in (streaming.spark.worker_gc)."""
import subprocess
import sys
import textwrap

from streaming.spark.worker_gc import YOUNG_THRESHOLD

SETUP = textwrap.dedent("""
    import gc
    gc.set_threshold(700, 10, 10)
    from pyspark.sql.streaming.tws_tester import TwsTester
    from streaming.operators.notifications import Settings
    from streaming.spark.job_query import DirectoryProcessor, QueueManagerProcessor
""")


def _threshold_after(statement: str) -> list[int]:
    """gc.get_threshold() in a fresh interpreter after the statement (the test process's own is left alone)."""
    code = SETUP + statement + "\nprint(*gc.get_threshold())\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [int(v) for v in done.stdout.split()]


def test_the_processors_set_the_young_threshold_and_keep_the_others():
    assert _threshold_after("pass") == [700, 10, 10]
    for processor in ("DirectoryProcessor()", 'QueueManagerProcessor(Settings(), "pec0")'):
        tester = f'TwsTester({processor}, timeMode="EventTime", eventTimeExtractor=int)'
        assert _threshold_after(tester) == [YOUNG_THRESHOLD, 10, 10], processor


def test_the_reading_task_sets_it():
    statement = textwrap.dedent("""
        from streaming.spark.kafka_source import KafkaStreamReader
        reader = KafkaStreamReader.__new__(KafkaStreamReader)
        reader.conf = {"bootstrap.servers": "127.0.0.1:1"}
        try:
            next(iter(reader.read(None)))
        except Exception:
            pass
    """)
    assert _threshold_after(statement)[0] == YOUNG_THRESHOLD
