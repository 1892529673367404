"""Tests of pipeline/ingest.py: the one-shot ingest, its progress, interruptions and write failures."""
