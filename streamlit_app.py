"""Start the app from a checkout: ``streamlit run streamlit_app.py`` (installed: ``r2med app``).

The router is ``r2med_app/streamlit_app.py``; Streamlit runs this file on every rerun, so it runs the
router afresh each time rather than importing it once.
"""

import runpy

runpy.run_module("r2med_app.streamlit_app", run_name="__main__")
