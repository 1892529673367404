"""Tests of pipeline/report/: the post-mortem report and its safety."""
