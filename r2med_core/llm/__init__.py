"""Large language models: live query rewriting (``generation``) and how a rewrite enters retrieval by
R2MED's rules (``rewrite``), the prompts and sampling (``prompts``), where the operator's key may go
(``endpoints``) and the LLM rerankers (``llm_rerank``).
"""
