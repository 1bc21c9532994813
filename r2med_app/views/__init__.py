"""The app's views: ``pages`` (what the router routes to, one file per page), ``panels`` (parts that
several pages draw), ``state`` (the view, mirrored in the URL) and ``ui`` (cached calls into
``r2med_core`` and shared drawing).

Not ``pages/`` beside the router: Streamlit treats such a folder as an old-style multipage app.
"""
