"""What a shared server allows a visitor: which models and systems they may name (``access``), which
local folders they may open (``roots``) and which cache entries may come in from another machine
(``portable``).

The server's policy, and nothing else: it sits above the system kinds it vets. The runs brought in from
elsewhere are a store the ``run:`` kind reads, so they live below the kinds (``r2med_core.imported_runs``).
Every rule here is asked by the pages and the CLI alike; none of it imports Streamlit.
"""
