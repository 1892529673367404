"""Dashboard pages: layout only; data comes from dashboards/data.py."""
