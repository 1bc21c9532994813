"""Long work: the workbench that says where any of it stands for a page (``workbench``: ready, waiting for
a click, running or failed), background jobs off the page's thread (``jobs``), Ray when one machine is not
enough (``distributed``) and grid sweeps (``sweep``).
"""
