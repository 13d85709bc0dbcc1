"""Helpers shared by the tests: tiny tokenizers, corpora, tasks and configs built in seconds (no mirror)."""
