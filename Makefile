# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup run test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Until the streaming job lands, `run` decodes the three example packets of [MS-MQSD] section 4.
run: setup
	$(BIN)/dirstream decode --protocol mqsd --hex "$$(cat tests/vectors/mqsd_4_request.hex)"
	$(BIN)/dirstream decode --protocol mqsd --hex "$$(cat tests/vectors/mqsd_4_reply_local.hex)"
	$(BIN)/dirstream decode --protocol mqsd --hex "$$(cat tests/vectors/mqsd_4_reply_remote.hex)"

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python tests/bench/bench_codecs.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
