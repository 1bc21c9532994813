"""Long work off the page's thread: background jobs (``jobs``), Ray when one machine is not enough
(``distributed``) and grid sweeps (``sweep``).
"""
