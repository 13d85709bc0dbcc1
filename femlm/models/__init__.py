"""The one place femlm loads tokenizers and models: `config` (the `model` section), `checkpoints` (what a
checkpoint is, without torch: `locate` resolves a name once into a local or Hub `Checkpoint`, used by start-up
validation and dry runs), `resolve` (the `ResolvedModel` every command receives), `load` (tokenizers, models
built from scratch or loaded from a checkpoint, classifiers), `heads` (the MLM head) and `optim` (optimizer
parameter groups)."""
