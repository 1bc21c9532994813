"""The app's views: ``pages`` (what the router routes to, one file per page), ``panels`` (parts that
several pages draw), ``state`` (the view, mirrored in the URL), and the Streamlit glue between pages and
``r2med_core``, one concern a module: ``markup`` (escaping), ``look`` (CSS), ``charts``, ``routes`` (page
paths), ``serving`` (the operator's settings), ``live`` (the live LLM), ``datasets`` (the dataset in view),
``summaries`` (per-dataset numbers), ``naming`` (system labels), ``notices`` (what is not the benchmark's
setting), ``annotation_db`` (the annotation store), ``bars`` (progress bars) and ``work`` (the core's compute
workbench asked, and the state it answers drawn: the Compute button, a job's progress, what went wrong).

Not ``pages/`` beside the router: Streamlit treats such a folder as an old-style multipage app.
"""
