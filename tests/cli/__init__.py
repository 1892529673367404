"""Tests of pipeline/cli/: commands as a person runs them."""
