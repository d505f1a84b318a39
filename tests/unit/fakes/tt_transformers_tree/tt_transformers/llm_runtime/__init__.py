"""tt-transformers' common runtime: only the vLLM call normaliser is stood in for here."""
