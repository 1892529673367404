"""Tests of pipeline/query/: connecting, the SQL sandbox and its limits, time ranges, dialects."""
