"""The routed pages: each file is one page that ``r2med_app.streamlit_app`` lists in the sidebar."""
