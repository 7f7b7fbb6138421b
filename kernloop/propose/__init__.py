"""Proposers: what every proposer takes and returns, the built-in tuner, the LLM's prompt and the reading of its answer."""
