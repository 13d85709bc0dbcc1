"""femlm: fully-explored masked language modelling (Zheng et al., 2020), end to end."""

from pathlib import Path

__version__ = "0.1.0"

# The Hydra configs ship inside the package (package data): found through the package, never the source tree.
CONF_DIR = Path(__file__).resolve().parent / "conf"


def __getattr__(name: str) -> object:
    # `from femlm import DataCollatorForFullyExploredLM`, imported on first use: `import femlm` stays torch-free.
    if name == "DataCollatorForFullyExploredLM":
        from femlm.masking.hf import DataCollatorForFullyExploredLM

        return DataCollatorForFullyExploredLM
    raise AttributeError(f"module 'femlm' has no attribute {name!r}")
