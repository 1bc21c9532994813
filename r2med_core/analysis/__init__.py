"""Reading results: why a system missed (``diagnosis``), the landing page's verdicts (``verdicts``), what
the query explorer shows (``explore``), the published scores (``published``) and a local score against
them (``paper_comparison``), whether a setting is the benchmark's (``fidelity``) and dataset statistics
(``stats``); MTEB's runs of R2MED (``mteb``), how MTEB names
R2MED's tasks and metrics (``mteb_names``) and why the paper's and MTEB's numbers for one model differ
(``mteb_protocols``).
"""
