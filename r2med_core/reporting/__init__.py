"""Putting results on paper: summary tables (``tables``), the judging pages' tables with the columns that
matter first (``review_tables``), the score charts shared by the Metrics page and the report and axes that
mean what they show (``figures``), the self-contained HTML / LaTeX report (``saved_report``) and where each number
comes from (``provenance``); results written as MTEB's files and MTEB's result files read back
(``mteb_files``).
"""
