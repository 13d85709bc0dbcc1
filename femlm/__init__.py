"""femlm: fully-explored masked language modelling (Zheng et al., 2020), end to end."""

__version__ = "0.1.0"
