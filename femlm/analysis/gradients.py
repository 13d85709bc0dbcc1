"""Per-example gradients g(m) = d l(theta; x, m) / d theta of the masked-LM loss, for a parameter subset.

The loss follows the paper's definition: ``m o x`` replaces *every* masked position by the mask token (no
80/10/10 replacement, which would make g(m) random given m) and ``l = mean_{i: m_i = 1} -log P(x_i | m o x)``
(the paper sums; with a fixed tau the mean is the sum / tau, a constant factor that changes no correlation
or variance ratio and matches the training loss). The model is put in ``eval()`` mode so dropout adds no
noise: g(m) is then a deterministic function of the mask, which Theorem 1 assumes.

Two ways to get one gradient per row (a row is one sequence with one mask):

* ``hooks``: one batched forward + backward per chunk of rows. Every selected parameter must be the weight
  or bias of an ``nn.Linear``; its per-row gradient is ``sum_t delta_t x_t^T`` (weight) or ``sum_t delta_t``
  (bias) from the layer input ``x`` and output gradient ``delta`` captured by hooks. Rows never interact in
  a transformer without batch norm, so the gradient of the summed loss splits into per-row gradients.
* ``vmap``: ``torch.func.vmap(grad(loss))`` over rows with ``functional_call``: works for any parameter,
  but on CPU the batching fallbacks of attention kernels make it several times slower than ``hooks``.

Cost: exactly one forward and one backward pass per row, ``chunk`` rows per call.

Every gradient of every analysis (covariance, variance, decomposition, null model, passes) is computed here, so
this is where a stop request is polled: before each chunk (femlm.stop.check). The analyses write their results
only at the end, their JSON last, so a stopped analysis leaves no analysis.json / decomposition.json / passes.json
and the same command run again recomputes it (every mask stream is seeded).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from femlm.analysis.parameters import default_parameters
from femlm.errors import UserError
from femlm.models.heads import find_mlm_head
from femlm.stop import check


def select_parameters(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Names of the parameters matching any fnmatch pattern, in ``named_parameters()`` order."""
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            # A pattern that matches nothing is almost always a typo or another architecture's naming.
            raise UserError(f"analysis.parameters: pattern {pattern!r} matches no parameter of the model; "
                            f"names look like {names[min(5, len(names) - 1)]!r}")
    return [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    module_name, _, attr = name.rpartition(".")
    return model.get_submodule(module_name), attr


class MaskedLMGradients:
    """``grads(seq_idx, masks) -> Tensor[N, P]``: flattened per-row gradients for a fixed mini-batch.

    ``seq_idx[N]`` picks the sequence of each row from ``input_ids[S, L]``; ``masks[N, L]`` are its masks and
    must all hold the same number of ones (one tau per call keeps the sparse gather rectangular). ``P`` is
    the total size of the selected parameters, concatenated in ``names`` order. ``passes`` counts the
    forward(+backward) passes, one per row. The constructor puts the model in eval mode, moves it to
    ``device`` and leaves ``requires_grad`` on the selected parameters only (the analysis owns the model).
    ``patterns=None`` selects the first layer's attention and feed-forward matrices by structure.
    """

    def __init__(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 mask_token_id: int, patterns: Sequence[str] | None, method: str = "auto", chunk: int = 16,
                 device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.patterns = None if patterns is None else list(patterns)
        # None: the first layer's attention and feed-forward matrices, found by structure (femlm.analysis.parameters)
        self.names = default_parameters(model) if patterns is None else select_parameters(model, patterns)
        params = dict(model.named_parameters())
        self.shapes = [tuple(params[n].shape) for n in self.names]
        self.numel = sum(params[n].numel() for n in self.names)
        linear = all(isinstance(_owner(model, n)[0], nn.Linear) for n in self.names)
        if method == "hooks" and not linear:
            raise UserError("analysis.method=hooks: every selected parameter must be an nn.Linear weight or "
                            "bias; use method=vmap (or auto) for others")
        self.method = ("hooks" if linear else "vmap") if method == "auto" else method
        self.input_ids = input_ids.to(self.device)
        # An all-ones attention mask is the same as none; passing none keeps mask building out of vmap.
        full = attention_mask is None or bool(attention_mask.bool().all())
        self.attention_mask = None if full else attention_mask.to(self.device)
        self.mask_token_id = int(mask_token_id)
        self.chunk = int(chunk)
        self.passes = 0
        self.head = find_mlm_head(model)  # by structure (femlm.models.heads); None: logits at every position
        for name, param in model.named_parameters():
            param.requires_grad_(name in self.names)

    def describe(self) -> dict[str, Any]:
        """What analysis.json records about the parameters studied."""
        return {"patterns": self.patterns, "chosen_by": "structure" if self.patterns is None else "patterns",
                "names": list(self.names), "numel": self.numel}

    # ------------------------------------------------------------------ common pieces
    def _rows(self, seq_idx: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        masks = masks.to(self.device)
        counts = masks.sum(dim=1)
        if counts.numel() and bool((counts != counts[0]).any()):
            raise ValueError("all masks of one call must hold the same number of masked positions")
        tau = int(counts[0]) if counts.numel() else 0
        ids = self.input_ids[seq_idx.to(self.device)]
        pos = masks.nonzero()[:, 1].view(len(masks), tau)  # row-major: each row's positions, sorted
        targets = torch.gather(ids, 1, pos)
        inputs = ids.masked_fill(masks, self.mask_token_id)
        att = None if self.attention_mask is None else self.attention_mask[seq_idx.to(self.device)]
        return inputs, att, pos, targets

    def _row_losses(self, inputs: torch.Tensor, att: torch.Tensor | None, pos: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
        """Mean masked-token cross-entropy of each row, ``[N]``; logits only at masked positions if possible."""
        if self.head is None:
            logits = self.model(input_ids=inputs, attention_mask=att).logits
            logits = torch.gather(logits, 1, pos[..., None].expand(-1, -1, logits.shape[-1]))
        else:
            hidden = self.model.base_model(input_ids=inputs, attention_mask=att)[0]
            hidden = torch.gather(hidden, 1, pos[..., None].expand(-1, -1, hidden.shape[-1]))
            logits = self.head(hidden)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        return losses.view(targets.shape).mean(dim=1)

    def __call__(self, seq_idx: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        out = []
        for start in range(0, len(masks), self.chunk):
            check(f"the analysis (after {self.passes} gradient rows)")
            sl = slice(start, start + self.chunk)
            rows = self._rows(seq_idx[sl], masks[sl])
            out.append(self._hooks(*rows) if self.method == "hooks" else self._vmap(*rows))
            self.passes += len(rows[0])
        if not out:
            return torch.zeros(0, self.numel, device=self.device)
        return torch.cat(out)

    # ------------------------------------------------------------------ hooks: batched backward
    def _hooks(self, inputs: torch.Tensor, att: torch.Tensor | None, pos: torch.Tensor,
               targets: torch.Tensor) -> torch.Tensor:
        captured: dict[int, list[list[Any]]] = {}
        handles = []
        owners = [_owner(self.model, n) for n in self.names]

        def forward_hook(module: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            record: list[Any] = [args[0].detach(), None]
            captured.setdefault(id(module), []).append(record)
            output.register_hook(lambda grad: record.__setitem__(1, grad.detach()))

        for module in {id(m): m for m, _ in owners}.values():
            handles.append(module.register_forward_hook(forward_hook))
        try:
            with torch.enable_grad():
                losses = self._row_losses(inputs, att, pos, targets)
                params = [p for n, p in self.model.named_parameters() if n in self.names]
                torch.autograd.grad(losses.sum(), params)  # the hooks capture what we need; discard the sum
        finally:
            for handle in handles:
                handle.remove()
        rows = len(inputs)
        flat = []
        for name, (module, attr) in zip(self.names, owners, strict=True):
            grad = None
            for x, delta in captured[id(module)]:  # a module called twice (shared weights) adds up
                if x.ndim < 3 or x.shape[0] != rows:  # e.g. DeBERTa's shared query_proj on position embeddings
                    raise UserError(f"analysis.parameters: {name} is also applied to an input shared by all rows "
                                    f"(shape {tuple(x.shape)}), so hooks cannot split its gradient per row; choose "
                                    "another parameter or analysis.method=vmap")
                x, delta = x.reshape(rows, -1, x.shape[-1]), delta.reshape(rows, -1, delta.shape[-1])
                part = torch.einsum("bto,bti->boi", delta, x) if attr == "weight" else delta.sum(dim=1)
                grad = part if grad is None else grad + part
            flat.append(grad.reshape(rows, -1))
        return torch.cat(flat, dim=1)

    # ------------------------------------------------------------------ vmap: torch.func
    def _vmap(self, inputs: torch.Tensor, att: torch.Tensor | None, pos: torch.Tensor,
              targets: torch.Tensor) -> torch.Tensor:
        from torch.func import functional_call, grad, vmap

        model = self.model
        frozen = {n: p.detach() for n, p in model.named_parameters() if n not in self.names}
        frozen.update(dict(model.named_buffers()))
        chosen = {n: p.detach() for n, p in model.named_parameters() if n in self.names}

        def row_loss(sel: dict[str, torch.Tensor], ids: torch.Tensor, mask: torch.Tensor | None,
                     where: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            kwargs = {"input_ids": ids[None]}
            if mask is not None:
                kwargs["attention_mask"] = mask[None]
            logits = functional_call(model, {**frozen, **sel}, args=(), kwargs=kwargs).logits[0]
            return F.cross_entropy(logits[where].float(), tgt)

        if att is None:
            fn = vmap(grad(lambda s, i, w, t: row_loss(s, i, None, w, t)), in_dims=(None, 0, 0, 0))
            grads = fn(chosen, inputs, pos, targets)
        else:
            grads = vmap(grad(row_loss), in_dims=(None, 0, 0, 0, 0))(chosen, inputs, att, pos, targets)
        return torch.cat([grads[n].reshape(len(inputs), -1) for n in self.names], dim=1)
