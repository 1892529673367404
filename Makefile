# Two commands on a fresh machine with only Python 3.10+:
#   make demo   set up a virtualenv, ingest the bundled sample logs, show what they say
#   make test   set up a virtualenv with the test tools (a browser, Prometheus), run the tests
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

# servelens, the test tools and the Spark extra in one pip run (a separate install of
# servelens first would build it and resolve its dependencies twice); not compiled at install,
# since most of those modules are never imported: the test run writes the byte code of those
# it imports
$(VENV)/.test-deps: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test,spark]'
	touch $@

demo: $(BIN)/servelens
	$(BIN)/servelens ingest sample_logs/incident/ --store $(STORE)
	@echo; echo "Scaling signals of the sample incident:"
	$(BIN)/servelens sql "select instance, signal, severity, strftime(window_start, '%H:%M') as since_utc, round(value, 2) as value, threshold from scaling_signals order by window_start, instance" --store $(STORE)
	$(BIN)/servelens report --store $(STORE) --output incident-report.md --force
	@echo "Post-mortem written to incident-report.md. Explore: $(BIN)/servelens dashboard --store $(STORE)"

test: $(VENV)/.test-deps
	@if [ -x tests/e2e/install_browser.sh ]; then tests/e2e/install_browser.sh; fi
	@if [ -x tests/e2e/install_prometheus.sh ]; then tests/e2e/install_prometheus.sh; fi
	@# the Spark group (tests/query/test_spark_views.py: the views on PySpark local[2] equal DuckDB's)
	@# needs the `spark` extra and Java 17, which this installs; it takes 2-3 min wall, 2 min
	@# CPU of its own (docs/spark.md). Alone: $(BIN)/python -m pytest -q -m spark
	PYTHON=$(BIN)/python tests/e2e/install_spark.sh
	@# one worker per core (pytest-xdist);
	@# the slowest tests are listed at the end. Under CI=true a skip is a failure (tests/conftest.py).
	@# Byte code is written even where the environment says not to: the suite starts many
	@# Python processes, and each would otherwise compile the modules it imports afresh
	$(BIN)/python -m compileall -q pipeline parsers dashboards
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n auto --durations=15

# the whole benchmark, ~30 min on 2 quiet cores (bench/RESULTS.md); its dashboard part drives
# headless Chromium through Playwright (the test extra), so it installs both first; then the
# one-shot question beside lnav (bench/lnav.py installs Debian's lnav, or says why it cannot)
bench: $(VENV)/.test-deps
	@if [ -x tests/e2e/install_browser.sh ]; then tests/e2e/install_browser.sh; fi
	$(BIN)/python bench/run.py
	$(BIN)/python bench/lnav.py

clean:
	rm -rf $(VENV) $(STORE)
