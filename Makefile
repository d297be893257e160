# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup system-deps run stop test bench bench-codecs bench-replication bench-producers soak clean

# The virtual environment, the compiled build and the embedded broker's Kafka jars (fetched once
# from Maven Central).
setup: $(VENV)/.installed streaming/native-build.json
	$(BIN)/dirstream broker fetch
	$(BIN)/python -m infra.pyspark_bytecode

# The job's hot-path modules compiled with mypyc beside their sources, again whenever one changes.
# Without gcc the build fails and the pure-Python sources run: the line below says so.
NATIVE_SOURCES := $(wildcard streaming/__init__.py streaming/wire/*.py streaming/operators/*.py)
streaming/native-build.json: $(VENV)/.installed $(NATIVE_SOURCES) infra/native_build.py
	$(BIN)/python -m infra.native_build > build-native.log 2>&1 || \
	  { echo "make setup: the compiled build failed (build-native.log): the pure-Python sources run"; \
	    rm -f $@; }

$(VENV)/.installed: pyproject.toml
	bash infra/system_deps.sh --run
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# What the tests need from Debian's packages, installed only when missing (root or sudo); setup
# installs what `make run` needs (python3-venv, Java 17 or later, Maven) the same way.
system-deps:
	bash infra/system_deps.sh

# The main job on the embedded defaults: start the embedded broker, publish a simulated enterprise's
# traffic (ground truth in var/truth.json), start the authority responder in the background, then
# run the job into var/dirstream.db until Ctrl-C.
run: setup
	$(BIN)/dirstream broker start
	@# the topics hold one simulated run: traffic published again would be dated from the same start,
	@# behind the checkpoint's watermark, and its truth would replace the first one's
	@if [ -f var/truth.json ]; then \
	  echo "make run: the topics already hold the traffic of var/truth.json: the job goes on with it" \
	       "(make clean, then make run, for another seed or count)"; \
	else \
	  $(BIN)/dirstream produce simulate --seed $(DEMO_SEED) --count $(DEMO_MESSAGES) --truth var/truth.json; \
	fi
	$(BIN)/dirstream produce respond --truth var/truth.json > var/responder.log 2>&1 & \
	  responder=$$!; echo $$responder > var/responder.pid; \
	  trap 'kill $$responder 2>/dev/null; rm -f var/responder.pid; \
	        echo "make run: the embedded Kafka broker is still running (127.0.0.1:19092, data in var/broker);" \
	             "make stop stops it"' EXIT; \
	  $(BIN)/dirstream run --pec-name pec0

# Stops what `make run` started: the responder (if still running) and the embedded broker.
stop:
	-@test -f var/responder.pid && kill $$(cat var/responder.pid) 2>/dev/null; rm -f var/responder.pid
	-$(BIN)/dirstream broker stop

DEMO_MESSAGES ?= 20000
DEMO_SEED ?= 1

test: system-deps setup
	$(BIN)/python -m pytest -q -n auto --dist loadgroup --durations=15

bench: setup
	$(BIN)/python tests/bench/bench_codecs.py
	$(BIN)/python tests/bench/bench_job.py
	$(BIN)/python tests/bench/bench_replication.py
	$(BIN)/python tests/bench/bench_whole_job.py
	$(BIN)/python tests/bench/bench_batches.py

# The whole job for 60 minutes at 2,000 msg/s on a fresh embedded Kafka (every fault type, the
# authorities answering, the broker restarted at minute 20), then stopped for 10 minutes and caught
# up; a table once a minute, the pass criteria, var/soak/soak.json and var/soak/soak.png
# (docs/benchmarks.md, where the hour at 2,000 msg/s on a 2-core machine is recorded).
SOAK_RATE ?= 2000
SOAK_MINUTES ?= 60
SOAK_ARGS ?=
soak: setup
	$(BIN)/python tests/bench/soak_job.py --rate $(SOAK_RATE) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

bench-replication: setup
	$(BIN)/python tests/bench/bench_replication.py

bench-codecs: setup
	$(BIN)/python tests/bench/bench_codecs.py

# The simulator's messages per CPU second and the object authorities' answers at truth sizes of 100,000,
# 1,000,000 and 10,000,000 messages.
bench-producers: setup
	$(BIN)/python tests/bench/bench_producers.py

clean:
	-$(BIN)/dirstream broker stop
	rm -rf $(VENV) .pytest_cache .hypothesis var build streaming/native-build.json
	find streaming -name "*.so" -delete
