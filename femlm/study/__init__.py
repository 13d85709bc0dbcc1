"""The evidence study of issue 17 (`make study`): does fully-explored masking reduce the variance of the
training gradient, does that make continual pre-training faster at equal compute, and does anything survive
downstream? Plan: femlm/conf/experiment/study.yaml; driver: femlm.study.driver; statistics: femlm.study.stats;
results: femlm.study.results (results/study/)."""
