"""Staging views: each source's events shaped into one row per thing (request, stats sample, scrape), read by the metrics layer."""
