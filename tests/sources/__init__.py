"""Tests of pipeline/sources/ and the samples sources (scrape, Prometheus API): discovery, fingerprints, lines."""
