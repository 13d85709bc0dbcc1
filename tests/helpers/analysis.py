"""A micro BERT, its tokenizer, token blocks and an analyze config: `femlm analyze` on CPU in seconds."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = 40
ARCH = {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 32, "max_position_embeddings": 32}


def micro_tokenizer(out: Path):
    from transformers import BertTokenizer

    out.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(WORDS)]
    (out / "vocab.txt").write_text("".join(f"{t}\n" for t in vocab))
    tok = BertTokenizer(vocab=str(out / "vocab.txt"), do_lower_case=True, model_max_length=32)
    tok.save_pretrained(str(out))
    return tok


def micro_model(vocab_size: int, seed: int = 0):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    arch = {k: v for k, v in ARCH.items() if k != "model_type"}
    return BertForMaskedLM(BertConfig(vocab_size=vocab_size, attn_implementation="eager", **arch)).eval()


def blocks(seqs: int, length: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    body = torch.randint(5, 5 + WORDS, (seqs, length - 2), generator=gen)
    return torch.cat([torch.full((seqs, 1), 2), body, torch.full((seqs, 1), 3)], dim=1)


def analyze_config(tmp_path: Path, tokenizer_dir: str | None = None, **analysis):
    from femlm.config import FemlmConfig

    cfg = FemlmConfig(command="analyze")
    cfg.command = "analyze"
    cfg.model.name = "micro"
    cfg.domain.name = "cs"
    cfg.model.name_or_path = None
    cfg.model.tokenizer = tokenizer_dir
    cfg.model.config_name = None
    cfg.model.arch = dict(ARCH)
    cfg.model.attn_implementation = "eager"
    cfg.data.block_size = 24
    cfg.logger.progress = False
    cfg.analysis.results_dir = str(tmp_path / "results")
    cfg.runtime.micro_batch_size = 8
    settings = {"kind": "both", "sequences": 2, "tau": 4, "budget": 6, "reference": 4, "hamming_bins": 3,
                "num_masks": [2, 4], "bootstrap": 50,
                "parameters": ["*layer.0.attention.self.query.weight", "*layer.0.intermediate.dense.weight"]}
    settings.update(analysis)
    for key, value in settings.items():
        setattr(cfg.analysis, key, value)
    return cfg


def make_run(tmp_path: Path):
    from femlm.runs import Run

    (tmp_path / "run").mkdir(parents=True)
    return Run(dir=tmp_path / "run", command="analyze")
