"""The evidence studies (`make study`, `make study-base`): does fully-explored masking reduce the variance of the
training gradient, does that make continual pre-training faster at equal compute, and does anything survive
downstream? Plan: femlm/conf/experiment/study.yaml (femlm.study.plan), whose steps femlm.study.driver hands to the
experiment runner (femlm.experiment); statistics: femlm.study.stats (pure); results/study/: femlm.study.results,
which reads the runs (collect, on report's collector), compares the arms (compare) and writes figures, tables and
the README (figures, tables, sections, readme; labels and number formats in text)."""
