"""The one place femlm loads tokenizers and models: `config` (the `model` section), `checkpoints` (what a
checkpoint is, without torch: used by start-up validation and dry runs) and `load` (tokenizers, models built
from scratch or loaded from a checkpoint, classifiers, the MLM head, optimizer parameter groups)."""
