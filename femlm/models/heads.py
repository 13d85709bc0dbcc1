"""The masked-LM head of any Hugging Face masked LM, found by structure, not by attribute names.

The head is what maps the encoder's hidden states to vocabulary logits: the output embeddings
(`model.get_output_embeddings()`) and the modules that feed them. They are found by watching one tiny forward
pass: the model's direct children other than the encoder (`model.base_model`) that run after it, each taking
the previous one's output (the first takes the encoder's hidden states, the last returns the logits), with the
output embeddings inside one of them. BERT's `cls`, RoBERTa's and MPNet's `lm_head`, DeBERTa's `cls` or
`lm_predictions` (which also takes the word embeddings), ModernBERT's `head` + `decoder` and DistilBERT's four
loose modules are all such chains. The chain is then checked to give the model's own logits at a subset of
positions (so it is position-wise, as sparse prediction needs); a model where any of this fails has no
`MLMHead` and is run dense, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

PROBE_TOKENS = 8  # length of the probe sequence


@dataclass
class MLMHead:
    """`head(hidden [..., H]) -> logits [..., V]`: the model's own head modules called in the model's order."""

    names: list[str]  # the model's children that form the head, in call order (e.g. ["head", "decoder"])
    calls: list[tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]  # module, extra args, kwargs

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        for module, extra, kwargs in self.calls:
            hidden = module(hidden, *extra, **kwargs)
        return hidden

    def owns(self, parameter: str) -> bool:
        """Whether a parameter name (as in `model.named_parameters()`) belongs to the head."""
        return any(parameter.startswith(name + ".") for name in self.names)


def find_mlm_head(model: nn.Module) -> MLMHead | None:
    """The model's masked-LM head (see the module docstring), or None."""
    return trace_mlm_head(model)[0]


def trace_mlm_head(model: nn.Module) -> tuple[MLMHead | None, str]:
    """(head, "") or (None, why not), from one forward pass of a probe sequence in eval mode."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    base = getattr(model, "base_model", None)
    if out is None or base is None or base is model:
        return None, "the model has no output embeddings apart from its encoder"
    children = [(n, m) for n, m in model.named_children() if m is not base]
    if not any(x is out for _, m in children for x in m.modules()):
        return None, "the output embeddings are not in a module outside the encoder"
    calls: list[tuple[str, nn.Module, tuple, dict, Any]] = []
    encoded: list[Any] = []
    hooks = [base.register_forward_hook(lambda _m, _a, output: encoded.append(output))]
    for name, module in children:
        hooks.append(module.register_forward_hook(
            lambda m, args, kwargs, output, n=name: calls.append((n, m, args, kwargs, output)), with_kwargs=True))
    config = model.config
    ids = (torch.arange(PROBE_TOKENS) % config.vocab_size)[None].to(_device(model))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    except Exception as err:  # noqa: BLE001 - a model the probe cannot run: the dense path is used
        return None, f"the probe forward failed ({type(err).__name__})"
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    if len(encoded) != 1 or not calls:
        return None, "the head is not a chain of modules after the encoder"
    hidden = previous = encoded[0][0]  # last_hidden_state of a ModelOutput or a tuple
    chain = []
    for name, module, args, kwargs, output in calls:
        extra = args[1:]
        if not args or args[0] is not previous or any(isinstance(a, torch.Tensor) for a in extra) \
                or any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return None, f"{name} does not take the previous module's output alone"
        chain.append((name, module, tuple(extra), dict(kwargs)))
        previous = output
    if previous is not logits or not any(x is out for _, m, _, _ in chain for x in m.modules()):
        return None, "the head's output is not the model's logits"
    head = MLMHead([n for n, *_ in chain], [(m, e, k) for _, m, e, k in chain])
    with torch.no_grad():
        rows = torch.tensor([1, PROBE_TOKENS - 2])
        sparse = head(hidden[0, rows])
    if not torch.allclose(sparse, logits[0, rows], rtol=1e-4, atol=1e-5):
        return None, "the head's logits at a subset of positions differ from the model's"
    return head, ""


def _device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
