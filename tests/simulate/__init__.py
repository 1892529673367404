"""Tests of pipeline/simulate/: simulated logs, their formats and truth."""
