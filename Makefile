# Two commands on a fresh machine with only Python 3.10+:
#   make demo   set up a virtualenv, ingest the bundled sample logs, show what they say
#   make test   set up a virtualenv with the test tools (and a browser), run the tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STORE ?= servelens-store

.PHONY: demo test bench clean

$(BIN)/servelens: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.test-deps: $(BIN)/servelens
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(BIN)/servelens
	$(BIN)/servelens ingest sample_logs/ --store $(STORE)
	$(BIN)/servelens sql "select engine, instance, event, count(*) as events from events group by all order by all" --store $(STORE)

test: $(VENV)/.test-deps
	@if [ -x tests/e2e/install_browser.sh ]; then tests/e2e/install_browser.sh; fi
	$(BIN)/python -m pytest -q

bench: $(BIN)/servelens
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) $(STORE)
