"""Tests of pipeline/store/: manifest, commit, integrity, compact, prune, repair, remote stores, rollups."""
