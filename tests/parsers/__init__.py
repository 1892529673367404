"""Tests of parsers/: each engine's line anatomy, the decode stage (wrappers, exports), held-out public logs."""
