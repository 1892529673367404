"""Export views: the series the exporter and /metrics publish, over the metric and signal views."""
