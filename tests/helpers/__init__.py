"""Shared test helpers (no tests here): stores, writers of wrapped and exported logs, a fake engine."""
