#!/bin/sh
# Install what the Spark comparison tests (tests/test_spark_views.py) need: the `spark` extra
# (PySpark, which bundles Spark itself: no download at run time) into the project's virtualenv,
# and a Java runtime (Debian's OpenJDK 17) when there is none. Idempotent. Needs root for apt;
# without root it only says what to run.
set -eu

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
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y openjdk-17-jre-headless
