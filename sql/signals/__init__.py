"""Signal views: scaling signals, episodes and autoscaler decisions over the metric views."""
