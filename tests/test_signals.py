"""SIGINT and SIGTERM stop `dirstream run` as Ctrl-C does, whether sent to the driver alone or to its
whole process group (a service manager, a container runtime): the micro-batch in flight finishes,
the summary is printed, the exit code is 0; a second signal stops it at once. Nothing is lost: the
job run on to the end gives the tables a fresh checkpoint's --once gives. The first run starts while
the broker is down, and waits for it."""
import os
import signal
import time

from conftest import simulate
from job_runs import differences, dump, job, once_in_session, output
from streaming.sinks import open_sink


def _batches(url: str) -> int:
    try:
        sink = open_sink(url)
    except Exception:           # noqa: BLE001 -- not created yet
        return 0
    try:
        return sink.query("SELECT COUNT(*) AS n FROM pipeline_progress")[0]["n"]
    except Exception:           # noqa: BLE001 -- the job has not created its tables yet
        return 0
    finally:
        sink.close()


def _to_group(sig):
    return lambda proc: os.killpg(proc.pid, sig)


def _twice_to_group(proc) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGTERM)


# how each stop is sent, and what the job says
STOPS = {"SIGTERM to the process group": (_to_group(signal.SIGTERM), "stopping after the current batch"),
         "SIGINT to the driver alone": (lambda proc: proc.send_signal(signal.SIGINT), "stopping after the current batch"),
         "a second SIGTERM to the process group": (_twice_to_group, "a second signal: stopping at once")}


def test_sigterm_or_sigint_to_the_driver_or_its_group_stops_the_job_cleanly(kafka_broker, broker, tmp_path, spark):
    simulate(broker, tmp_path, "--seed", "9", "--count", "4000")
    sink, checkpoint = f"sqlite:///{tmp_path}/job.db", tmp_path / "ckpt"
    for what, (stop, says) in STOPS.items():
        before = _batches(sink)
        broker_down = before == 0
        if broker_down:
            kafka_broker.stop()
        proc = job(broker, sink, checkpoint, "--max-records", "300", "--metrics-port", "0")
        try:
            if broker_down:
                time.sleep(8)
                assert proc.poll() is None, output(proc)[-5000:]
                kafka_broker.start()
            deadline = time.monotonic() + 300
            while _batches(sink) <= before:          # a micro-batch committed by this run
                assert proc.poll() is None, output(proc)[-5000:]
                assert time.monotonic() < deadline, f"no micro-batch committed: {output(proc)[-5000:]}"
                time.sleep(0.5)
            stop(proc)
            assert proc.wait(300) == 0, f"{what}: {output(proc)[-5000:]}"
        finally:
            if proc.poll() is None:
                proc.kill()
        said = output(proc)
        assert not broker_down or f"Kafka at {broker} does not answer" in said, said[-3000:]
        assert says in said and "rows written:" in said, said[-3000:]
        assert "late rows: 0" in said, said[-3000:]
    # the rest, from the same checkpoint: the same query in the tests' Spark session
    once_in_session(spark, broker, sink, checkpoint / "job")
    fresh = f"sqlite:///{tmp_path}/fresh.db"
    once_in_session(spark, broker, fresh, tmp_path / "fresh")
    assert differences(dump(sink), dump(fresh)) == []
