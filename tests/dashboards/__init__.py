"""Tests of dashboards/: Streamlit AppTest and headless Chromium."""
