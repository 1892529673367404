"""Metric views: per-window and per-request figures over the staging views."""
