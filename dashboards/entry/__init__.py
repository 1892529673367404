"""The Streamlit entry script `servelens dashboard` runs (see app.py there)."""
