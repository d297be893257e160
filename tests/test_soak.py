"""The short version of `make soak` (tests/bench/soak_job.py): the whole job against a steady
stream of simulated traffic with every fault type, the authorities answering, the broker restarted
mid-run, the PostgreSQL sink stopped for 30 s mid-run, the job stopped and started again behind a
backlog; the script's behavioural criteria must
hold (memory under fixed ceilings over the whole run, micro-batches within --max-records, Ctrl-C with a backlog,
verify clean after the run) and the tables equal a fresh checkpoint's --once over the same Kafka
content. Lag and catch-up time are printed as figures. A few minutes at a low rate:
the hour-long run is `make soak`, not a test."""
import json
import subprocess
import sys
from pathlib import Path

SOAK = Path(__file__).parent / "bench" / "soak_job.py"
# Resident memory no process may exceed over the run, about twice what a loaded 2-core machine used
# (broker 952 MB with its fixed 768 MB heap, job JVM 4,744 with its fixed 4 GB heap, Python workers
# 842, driver 116): a leak shows, a slow machine does not.
CEILINGS_MB = {"broker": 2_000, "jvm": 8_000, "python workers": 2_000, "driver": 1_000}


def test_a_short_soak_rides_through_a_broker_restart_and_catches_up(tmp_path):
    out = tmp_path / "soak"
    # Lag and catch-up are printed as figures, not judged: a loaded machine is slower, not wrong (the
    # hour at full rate, `make soak`, judges them). What is judged is behaviour; the bounds below are
    # ones only a hang exceeds. 300 msg/s: about a sixth of what the job keeps up with on 2 cores, so
    # a machine half as fast, sharing its cores with the suite's other worker, still catches up.
    done = subprocess.run(
        [sys.executable, str(SOAK), "--minutes", "1.5", "--rate", "300", "--broker-restart-at", "0.75", "--restarts", "2",
         "--sink-outage-at", "0.8", "--sink-outage-s", "30",
         "--stop-minutes", "0.4", "--catch-up-minutes", "0.75", "--max-records", "5000", "--sample-s", "10",
         "--warmup-minutes", "0.5", "--memory-growth", "2.0", "--catch-up-memory", "2.0", "--quiet-s", "20",
         "--settle-minutes", "10", "--compare", "--timings-as-figures", "--out", str(out),
         # minutes of traffic covering hours of event time: every window and timer of the protocols fires
         # within the run (on the wall clock a 15-minute batching window would outlast it)
         "--clock", "accelerated",
         *(f"--memory-ceiling={kind}={mb}" for kind, mb in CEILINGS_MB.items())],
        capture_output=True, text=True, timeout=3600)
    result = json.loads((out / "soak.json").read_text())
    verdicts = {v["text"].split(":")[0]: v for v in result["verdicts"]}
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "soak: PASS" in done.stdout
    # every criterion was checked, not only passed; the timings are there as figures
    for kind in CEILINGS_MB:
        assert f"{kind} resident memory over the whole run" in verdicts
    # the stops and restarts cost no row (with the Ctrl-C before the catch-up: three stops)
    late = next(v for v in result["verdicts"] if v["text"].startswith("rows dropped as late over the whole run"))
    assert late["ok"] and "(3 stop(s) and restart(s)): 0" in late["text"], late
    assert {"every micro-batch within --max-records 5,000", "after the run", "Ctrl-C with a backlog",
            "the tables equal a fresh checkpoint's --once over the same Kafka content"} <= set(verdicts)
    # the database outage was ridden through: waited for with a console line, written again once back
    # (nothing lost: the fresh --once's tables above)
    assert verdicts["sink outage of 30 s"]["ok"], verdicts["sink outage of 30 s"]
    figures = {f.split(":")[0] for f in result["figures"]}
    # the steady phase ends at minute 1.5, or later if the sink outage waited long for the job's first batch
    for kind in ("broker", "driver", "jvm", "python workers"):
        assert any(f.startswith(f"{kind} resident memory, minute 0.75 -> ") for f in figures), result["figures"]
    assert {"job lag after minute 0.5", "catch-up", "end-to-end latency (publication to commit in the sink) after "
            "minute 0.5"} <= figures, result["figures"]
    # the latency markers were committed, each at least as late as it was published, and the catch-up
    # shows as latency (markers published while the job was stopped waited for it)
    steady = [s["latency"] for s in result["samples"] if s["phase"] == "steady" and s["latency"]["n"]]
    assert steady and all(0 < x["p50"] <= x["p99"] for x in steady), steady
    per_minute = [m for m in result["latency_per_minute"] if m["n"]]
    assert per_minute and max(m["p99"] for m in per_minute) >= 0.4 * 60 * 0.5, per_minute
    events = [what for _minute, what in result["events"]]
    assert "broker stopped" in events and "broker started again on its log directories" in events
    assert {"job stopped (SIGTERM to its process group)", "job stopped (SIGINT to the driver alone)"} <= set(events)
    assert events.index("sink database stopped") + 1 == events.index("sink database started again")
    # the producer rode through the broker's restart: every record confirmed, once (idempotent)
    ended = next(e for e in events if e.startswith("producer ended"))
    assert ended.startswith("producer ended (exit 0): "), ended
    produced = json.loads(ended.split(": ", 1)[1])
    assert produced["published"] == produced["delivered"] > 10_000, produced
    assert any(e.startswith("job started again") for e in events)
    assert any(e.startswith("caught up") for e in events), events
    assert any(e.startswith("job stopped (Ctrl-C): everything read and quiet") for e in events)
    assert any(e.startswith("event time moved on: 4 copies of the last notification") for e in events)
    behind = sum(n or 0 for n in result["catch_up"]["behind"].values())
    assert behind > 2_000 and result["catch_up"]["caught_up_after_min"] is not None
    # the job read every record the producer published (and the replies `produce respond` sent after it
    # ended), and the samples carry every figure
    assert result["samples"][-1]["queries"]["dirstream"]["read"] >= result["samples"][-1]["published"] > 10_000
    assert all(s["memory"]["jvm"] > 0 for s in result["samples"] if s["phase"] == "steady")
    assert (out / "soak.png").stat().st_size > 10_000


def test_a_soak_that_would_fill_the_disk_is_refused_before_it_starts(tmp_path):
    out = tmp_path / "soak"
    done = subprocess.run([sys.executable, str(SOAK), "--minutes", "1000000", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    # 2,000 msg/s for the steady phase and the default stop and catch-up (10 minutes each), 12 kB each
    assert f"soak: 120,002,400,000 messages need about 1,440,028.8 GB in {out}, which has " in done.stderr
    assert not (out / "work").exists()                  # no broker, job or producer was started
