"""The Streamlit dashboard: reads the store through the SQL views, never writes."""
