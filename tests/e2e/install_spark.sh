#!/bin/sh
# Install what the Spark comparison tests (tests/query/test_spark_views.py) need: the `spark` extra
# (PySpark, which bundles Spark itself: no download at run time) into the project's virtualenv,
# and a Java runtime (Debian's OpenJDK 17) when there is none. Idempotent. Needs root for apt;
# without root it only says what to run.
set -eu

# Under CI a tool that cannot be installed fails the run (the tests needing it would fail
# anyway, with less to say); elsewhere the script only says what to run.
missing() {
    case "${CI:-}" in ""|0|false|no) exit 0 ;; *) echo "${0##*/}: CI is set and this could not be installed" >&2; exit 1 ;; esac
}

PYTHON=${PYTHON:-.venv/bin/python}

if "$PYTHON" -c "import pyspark" 2>/dev/null; then
    echo "install_spark: pyspark $("$PYTHON" -c 'import pyspark; print(pyspark.__version__)') already installed"
else
    "$PYTHON" -m pip install --quiet -e '.[spark]'
    echo "install_spark: installed pyspark $("$PYTHON" -c 'import pyspark; print(pyspark.__version__)')"
fi

if command -v java >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_spark: no java on PATH; install a JDK 17 (e.g. apt-get install -y openjdk-17-jre-headless)" >&2
    missing
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y openjdk-17-jre-headless
