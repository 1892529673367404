"""Tests of the views in sql/ against truth files, real recordings and scrapes."""
