"""A team judging relevance: labels and the store that keeps them (``annotations``, with SQLite or
PostgreSQL in ``stores``), who is acting (``identity``) and who sees what (``visibility``), the pooled
judging queue (``queue``), judging a ranked list at speed (``list_judging``), ``adjudication`` of
disputed units and ``agreement`` between annotators, the ``hard`` items (long judging time × low
agreement), the team's qrels (``team``), pooling and holes (``pooling``), backups (``backup``) and the
LLM assessor (``llm_judge``).
"""
