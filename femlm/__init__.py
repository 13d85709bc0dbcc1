"""femlm: fully-explored masked language modelling (Zheng et al., 2020), end to end."""

from pathlib import Path

__version__ = "0.1.0"

# The Hydra configs ship inside the package (package data): found through the package, never the source tree.
CONF_DIR = Path(__file__).resolve().parent / "conf"
