"""What a shared server allows a visitor: which models and systems they may name (``access``), which
local folders they may open (``roots``), cache entries moved between machines (``portable``) and runs
brought in from elsewhere (``imported_runs``).

Every rule here is asked by the pages and the CLI alike; none of it imports Streamlit.
"""
