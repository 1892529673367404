"""Tests of pipeline/serve/: the exporter, its HTTP behaviour and Prometheus."""
