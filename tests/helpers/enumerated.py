"""A masked LM small enough to enumerate every mask: exact per-mask gradients and exact study targets.

``Enumerated`` is a softmax masked LM over ``n`` positions whose masked positions are predicted from a
weighted sum of the *unmasked* context embeddings, so g(m) depends on the whole mask (not additive). With
``additive=True`` the table is instead ``g(m) = (1/tau) sum_{i in m} a_i`` for fixed random vectors a_i (one
per position of each sequence): a model with no context interaction at all, the null model of Assumption 1.

Every per-mask gradient is tabulated, so the targets of the Monte-Carlo estimators (covariance at each
Hamming distance, K-mask variances, the data and mask terms of the batch gradient's variance, the additive
projection) are known exactly by enumeration. ``grad_fn`` looks the gradients up, with the signature of
`femlm.analysis.gradients.MaskedLMGradients`.
"""

from __future__ import annotations

import torch

from femlm.analysis.masks import all_masks, hamming


class Enumerated:
    """Exact per-mask gradients of a tiny masked LM for ``seqs`` fixed sequences, and a lookup grad_fn."""

    def __init__(self, seqs: int = 2, seed: int = 0, n: int = 6, tau: int = 2, vocab: int = 5, dim: int = 3,
                 additive: bool = False) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.n, self.tau = n, tau
        self.tokens = torch.randint(0, vocab, (seqs, n), generator=gen)
        emb = torch.randn(vocab, dim, generator=gen, dtype=torch.float64)
        pos = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        mix = torch.rand(n, n, generator=gen, dtype=torch.float64)
        weight = torch.randn(vocab, dim, generator=gen, dtype=torch.float64)
        self.masks = all_masks(n, tau)  # [C(n, tau), n]
        self.lookup = torch.full((1 << n,), -1, dtype=torch.long)
        self.lookup[self.code(self.masks)] = torch.arange(len(self.masks))
        table = torch.empty(seqs, len(self.masks), vocab * dim, dtype=torch.float64)
        if additive:
            self.contrib = torch.randn(seqs, n, vocab * dim, generator=gen, dtype=torch.float64)  # a_i
            table = torch.einsum("mi,sip->smp", self.masks.double(), self.contrib) / tau
        else:
            for s in range(seqs):
                for i, m in enumerate(self.masks):
                    w = weight.clone().requires_grad_(True)
                    ctx = (mix * (~m).double()[None, :]) @ emb[self.tokens[s]] + pos  # unmasked context only
                    logits = ctx[m] @ w.T
                    loss = torch.nn.functional.cross_entropy(logits, self.tokens[s][m])
                    (grad,) = torch.autograd.grad(loss, w)
                    table[s, i] = grad.flatten()
        self.table = table
        self.valid = torch.ones(seqs, n, dtype=torch.bool)

    @staticmethod
    def code(mask: torch.Tensor) -> torch.Tensor | int:
        """Bit code of a mask (or of each row of a mask matrix)."""
        codes = (mask.long() << torch.arange(mask.shape[-1])).sum(dim=-1)
        return int(codes) if codes.dim() == 0 else codes

    def index(self, masks: torch.Tensor) -> torch.Tensor:
        """Row of ``self.masks`` of each mask in ``masks[N, n]``."""
        return self.lookup[self.code(masks.cpu())]

    def grad_fn(self, seq_idx: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return self.table[seq_idx.cpu(), self.index(masks)].float()

    # ------------------------------------------------------------------ exact values by enumeration
    def centred(self, table: torch.Tensor | None = None) -> torch.Tensor:
        table = self.table if table is None else table
        return table - table.mean(dim=1, keepdim=True)  # [S, C, P]

    def exact_cov(self, table: torch.Tensor | None = None) -> dict[int, float]:
        """Cov at each H: mean over the ordered pairs at distance H (uniform, as the sampler draws), averaged
        over the sequences."""
        c = self.centred(table)
        inner = torch.einsum("sip,sjp->sij", c, c).mean(dim=0)
        dist = hamming(self.masks[:, None, :], self.masks[None, :, :])
        return {int(h): float(inner[dist == h].mean()) for h in dist.unique()}

    def tuples(self, k: int, strategy: str) -> torch.Tensor:
        """Every K-tuple of mask indices a draw can give, each equally likely: ``[T, K]``."""
        idx = torch.cartesian_prod(*[torch.arange(len(self.masks))] * k).view(-1, k)
        if strategy == "fe":  # fully-explored: pairwise disjoint masks only
            idx = idx[self.masks[idx].sum(dim=1).amax(dim=1) <= 1]
        return idx

    def exact_kmask_var(self, k: int, strategy: str) -> float:
        """Var of the K-mask gradient (per sequence, averaged over sequences)."""
        mean_k = self.centred()[:, self.tuples(k, strategy)].mean(dim=2)  # [S, T, P]
        return float((mean_k**2).sum(dim=-1).mean())

    # ------------------------------------------------------------------ the batch gradient's variance
    def seq_means(self) -> torch.Tensor:
        return self.table.mean(dim=1)  # [S, P]: mu_s = E_m g(m | x_s)

    def exact_sigma_d2(self) -> float:
        """Var_x(E_m[g | x]) over the sequences, with the unbiased (S - 1) denominator: the pool is a sample."""
        mu = self.seq_means()
        return float(((mu - mu.mean(dim=0)) ** 2).sum() / (len(mu) - 1))

    def exact_sigma_m2(self) -> float:
        """E_x[tr Var_m(g | x)]."""
        return float((self.centred() ** 2).sum(dim=-1).mean())

    def exact_c(self, strategy: str) -> float:
        """Cov of two masks of one draw of one sequence (FE: disjoint pairs; iid: independent -> 0)."""
        pairs = self.tuples(2, strategy)
        c = self.centred()
        return float((c[:, pairs[:, 0]] * c[:, pairs[:, 1]]).sum(dim=-1).mean())

    def slot_vectors(self, k: int, strategy: str) -> torch.Tensor:
        """Every equally likely outcome of one batch slot (a pool sequence, uniform, with a K-mask draw):
        the slot's K-copy mean gradient, ``[S * T, P]``."""
        return self.table[:, self.tuples(k, strategy)].mean(dim=2).flatten(0, 1)

    def exact_batch_var(self, k: int, strategy: str, slots: int) -> float:
        """E|g_batch - mu|^2 of a batch of ``slots`` independent slots, mu the pool mean gradient.

        ``slots`` 1 or 2 enumerates every batch (2: all ordered pairs of slot outcomes); larger batches
        would be Var(slot) / slots by independence, which is what the enumeration of 2 checks."""
        u = self.slot_vectors(k, strategy) - self.seq_means().mean(dim=0)
        if slots == 1:
            return float((u**2).sum(dim=-1).mean())
        if slots != 2:
            raise ValueError("enumerates batches of 1 or 2 slots")
        gram = u @ u.T
        return float((gram.diagonal()[:, None] + gram.diagonal()[None, :] + 2 * gram).mean() / 4)

    # ------------------------------------------------------------------ the additive (first-order) projection
    def first_order(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(h [S, n, P], a [S, n, P], g_add table [S, C, P]).

        h_i = E[g(m) | i in m]; the least-squares additive approximation (1/tau) sum_{i in m} a_i of g under
        the uniform mask law has a_i = (tau (n - 1) h_i - (tau - 1) sum_j h_j) / (n - tau)."""
        n, tau = self.n, self.tau
        member = self.masks.double()  # [C, n]
        h = torch.einsum("ci,scp->sip", member, self.table) / member.sum(dim=0)[None, :, None]
        a = (tau * (n - 1) * h - (tau - 1) * h.sum(dim=1, keepdim=True)) / (n - tau)
        g_add = torch.einsum("ci,sip->scp", member, a) / tau
        return h, a, g_add

    def exact_d2(self) -> torch.Tensor:
        """[S]: D2 = sum_i |h_i - g-bar|^2, the first-order (Hoeffding) effects' squared norm."""
        h, _, _ = self.first_order()
        return ((h - self.table.mean(dim=1, keepdim=True)) ** 2).sum(dim=(1, 2))
