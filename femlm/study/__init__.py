"""The evidence study of issue 17 (`make study`): does fully-explored masking reduce the variance of the
training gradient, does that make continual pre-training faster at equal compute, and does anything survive
downstream? Plan: femlm/conf/experiment/study.yaml (femlm.study.plan); driver: femlm.study.driver; statistics:
femlm.study.stats (pure); results/study/: femlm.study.results, which reads the runs (collect), compares the arms
(compare) and writes figures, tables and the README (figures, tables, sections, readme; labels and number
formats in text)."""
