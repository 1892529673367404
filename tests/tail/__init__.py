"""Tests of pipeline/tail/: the live tailer, its model, naming, faults and scrapes."""
