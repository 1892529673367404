"""The test suite: one folder per room of the code; shared helpers in helpers/, fixtures and CI rules in conftest.py."""
