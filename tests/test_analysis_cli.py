"""`femlm analyze` through the real CLI (subprocesses: slow, mostly Python start-up and imports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
pytestmark = pytest.mark.slow
ARCH = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
        "max_position_embeddings": 64}


def test_cli_rejects_an_unknown_analysis_kind(cli) -> None:
    result = cli("analyze", "spectrum", "--dry-run")
    assert result.code == 2 and "analysis.kind" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.mirror
def test_cli_analyze_both_on_a_checkpoint(cli, mirror: Path, tmp_path: Path) -> None:
    """`femlm analyze both model.name_or_path=<ckpt>` on real CS validation blocks (bert-base-uncased)."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    tok = BertTokenizer(vocab=str(mirror / "tokenizers" / "bert-base-uncased" / "vocab.txt"), do_lower_case=True)
    ckpt = tmp_path / "ckpt"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(tok), **ARCH)).save_pretrained(str(ckpt))
    tok.save_pretrained(str(ckpt))
    result = cli("analyze", "both", "preset=tiny", f"model.name_or_path={ckpt}", "model.tokenizer=null", "domain=cs",
                 "domain.max_documents=40", "data.block_size=32", "analysis.sequences=2", "analysis.tau=4",
                 "analysis.budget=4", "analysis.reference=3", "analysis.num_masks=[2,4]", "analysis.bootstrap=20",
                 "analysis.hamming_bins=2", "logger.progress=false", f"analysis.results_dir={tmp_path / 'results'}",
                 timeout=240)
    assert result.code == 0, result.stderr[-2000:]
    (summary,) = (tmp_path / "runs").glob("analyze/*/analysis.json")
    saved = json.loads(summary.read_text())
    assert saved["model"]["panel"] == "pretrained" and saved["settings"]["tau"] == 4
    assert set(saved["variance"]["ratios"]) == {"2", "4"}
    (copied,) = (tmp_path / "results").glob("analysis_cs_*_ckpt")
    assert (copied / "covariance_vs_hamming.png").is_file()
