"""Gradient-variance study of the FE-MLM paper: covariance vs Hamming distance, K-mask variance.

Entry point ``run.run_analyze(cfg, run)``. Modules: ``masks`` (mask pairs at a controlled Hamming distance,
K-mask draws), ``gradients`` (per-example gradients), ``estimators`` (unbiased centred Gram statistics,
bootstrap), ``studies`` (the studies on any gradient function), ``figures``.
"""
