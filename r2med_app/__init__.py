"""The R2MED Explorer app: a Streamlit router (``streamlit_app``) and its pages and panels
(``views``) over ``r2med_core``.

Start it with ``r2med app`` once the package is installed, or ``streamlit run streamlit_app.py`` in a
checkout. Pages only call ``r2med_core`` and draw what it returns.
"""
