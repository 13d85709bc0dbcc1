"""The GPU study (issue 45): its plan's arithmetic (N from the TOST power rule, seeds per window, windows to N on
each card), the typed `gpu:` block's errors, the rules that let windows add up (study code, seeds kept whole, the
one revision of N, prepared data reused only on equal settings), the README before N; marked slow, the smoke
study end to end through the one training loop, twice."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from femlm.errors import UserError
from femlm.experiment.schema import Experiment, load, parse
from femlm.experiment.tables import Options
from femlm.study import gpu_plan, gpu_windows
from femlm.study.gpu_power import tost_pairs, tost_power

REPO = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("FEMLM_MIRROR") or REPO.parent / "shared" / "data")
ARMS = ["mlm_subword", "fe_passes_subword", "fe_subword"]


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory):
    """The study's window as the full experiment file plans it (composed once for the module)."""
    from femlm.study.gpu import Window

    tmp = tmp_path_factory.mktemp("study_gpu")
    return Window(load("study_gpu"), Options(runs=tmp / "runs", out=tmp / "out", stamp="test"))


# ---------------------------------------------------------------------------------------------- power
def test_the_power_rule_gives_46_at_holms_first_step_and_39_for_the_two_equivalence_tests_alone() -> None:
    assert tost_pairs(0.0187, 0.01, 0.05 / 4, 0.8) == 46  # the declared family: 2 x 2 hypotheses under Holm
    assert tost_pairs(0.0187, 0.01, 0.05 / 2, 0.8) == 39  # the figure: the TOST at 0.025 per side
    assert tost_power(45, 0.0187, 0.01, 0.0125) < 0.8 <= tost_power(46, 0.0187, 0.01, 0.0125)
    assert tost_pairs(0.03, 0.01, 0.0125, 0.8) > tost_pairs(0.0187, 0.01, 0.0125, 0.8)


def test_the_tost_power_formula_agrees_with_a_simulation() -> None:
    from scipy import stats

    rng = np.random.default_rng(0)
    n, sd, delta, alpha = 46, 0.0187, 0.01, 0.0125
    d = rng.normal(0.0, sd, size=(20_000, n))
    mean, se = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
    crit = stats.t.ppf(1 - alpha, n - 1)
    simulated = float(((mean - crit * se > -delta) & (mean + crit * se < delta)).mean())
    assert simulated == pytest.approx(tost_power(n, sd, delta, alpha), abs=0.015)


# ---------------------------------------------------------------------------------------------- the plan
def test_the_plan_prints_n_delta_the_gates_and_seeds_per_window_for_both_cards(w) -> None:
    text = w.plan.text()
    assert w.plan.n == 46 and "N = 46 paired seeds" in text and "delta: 0.01 nats (stats.delta)" in text
    assert "gates: the warm-up's Wikipedia held-out loss >= 1 nat below the context-free baseline" in text
    for card in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        assert f"  {card}: " in text
    assert text.count("seeds per window:") == 2 and text.count("windows to N:") == 2
    # every figure says whether it was measured or assumed
    assert "training row tokens/s (assumed" in text and "measured:" in text
    # K and the ratio come from the arm configs: FE across passes' K = floor(1 / 0.15) = 6, K-copy 4
    assert w.plan.runs.cycle == 6 and w.plan.runs.passes["fe_subword"] == pytest.approx(
        w.plan.runs.passes["mlm_subword"] / 4)
    assert w.plan.problems == []


def test_seeds_per_window_and_windows_to_n_follow_the_unit_costs(w) -> None:
    g, runs = copy.deepcopy(w.g), w.plan.runs
    g.downstream.pretrain_seeds = 0
    card = g.cards[0]
    plan = gpu_plan.card_plan(g, card, runs, 46, 480.0, ARMS)
    part = {name: s for name, s, _ in plan.parts}
    fixed = card.startup_s.value + card.results_s.value + g.window.margin_s
    assert plan.later_window == int((480 - fixed) // part["one seed's arms"])
    assert plan.first_window == int((480 - fixed - part["warm-up"]) // part["one seed's arms"])
    assert plan.windows == 1 + math.ceil((46 - plan.first_window) / plan.later_window)
    # what earlier windows measured on this card replaces the unit costs
    slow = gpu_plan.card_plan(g, card, runs, 46, 480.0, ARMS, measured={"arms": 100.0})
    assert slow.later_window == int((480 - fixed) // 100.0) and "measured" in slow.parts[2][2]


def test_arms_that_do_not_cover_one_cycle_of_visits_are_refused(w) -> None:
    counts = {k: getattr(w.g.expected, k) for k in ("warmup_train_blocks", "warmup_validation_blocks",
                                                    "arms_train_blocks", "arms_validation_blocks")}
    counts["arms_train_blocks"] *= 10
    from femlm.study import gpu_configs as configs

    runs = gpu_plan.read_runs(configs.warmup(w.exp), configs.arms(w.exp), {}, counts, "test")
    assert runs.problems and "one full cycle of K = 6 visits" in runs.problems[0]
    plan = gpu_plan.make_plan(w.g, 8, runs, ARMS, [0.01, 0.01], counts)
    assert "REFUSED" in plan.text()
    with pytest.raises(UserError, match="one full cycle"):
        plan.refuse()


@pytest.mark.parametrize("model_type", ["bert", "roberta-prelayernorm", "modernbert"])
def test_the_plans_model_counts_match_the_built_model(model_type: str) -> None:
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.train.flops import flop_counts

    arch = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "max_position_embeddings": 66, "type_vocab_size": 1}
    extra = {"pad_token_id": 0, "cls_token_id": 2, "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3} \
        if model_type == "modernbert" else {}
    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(AutoConfig.for_model(model_type, vocab_size=100, **arch, **extra))
    typed = {**arch, "model_type": model_type}
    assert gpu_plan.model_flops(typed, 100) == flop_counts(model)
    assert gpu_plan.model_parameters(typed, 100) == sum(p.numel() for p in model.parameters())


def test_the_plan_counts_the_study_model_and_refuses_a_layer_type_it_cannot(w) -> None:
    runs = w.plan.runs
    assert runs.arch["model_type"] == "modernbert" and runs.params == 6_367_744  # the pre-flight's C1: 6.4M
    assert "ModernBERT" in w.plan.text() and "6,367,744 parameters" in w.plan.text()
    with pytest.raises(UserError, match="model.arch.model_type='deberta-v2': the plan counts bert"):
        gpu_plan.model_parameters({**runs.arch, "model_type": "deberta-v2"}, runs.vocab)


def test_the_composed_runs_are_the_preflights_recipe(w) -> None:
    """results/study-gpu/preflight/README.md: C1's warm-up and its continual phase, as femlm composes them."""
    warm, arms, _ = w.composed
    for c in (warm, *arms.values()):
        cfg = c.cfg
        assert dict(cfg.model.arch).items() >= {"model_type": "modernbert", "hidden_size": 256, "num_hidden_layers": 4,
                                                "num_attention_heads": 4, "intermediate_size": 1024,
                                                "attention_dropout": 0.0, "mlp_dropout": 0.0,
                                                "embedding_dropout": 0.0}.items()
        t = cfg.trainer
        assert (cfg.data.block_size, t.batch_size, tuple(t.betas), t.eps, t.weight_decay, t.grad_clip, t.schedule) == \
            (128, 32, (0.9, 0.98), 1e-6, 0.01, 1.0, "linear")
        assert cfg.runtime.sdpa_backend == "efficient" and cfg.model.vocab_size == 8192
    assert (warm.cfg.trainer.max_steps, warm.cfg.trainer.lr, warm.cfg.trainer.warmup_ratio) == (2000, 1e-3, 0.1)
    for c in arms.values():
        assert (c.cfg.trainer.max_steps, c.cfg.trainer.lr, c.cfg.trainer.warmup_ratio) == (300, 3e-4, 0.06)
        assert (c.cfg.domain.name, c.cfg.domain.max_documents, c.cfg.data.split_seed) == ("acl", 20, 0)
    assert arms["fe_subword"].cfg.masking.num_copies == 4


def test_a_launch_bound_step_floors_the_plans_speed(w) -> None:
    g, runs = copy.deepcopy(w.g), w.plan.runs
    card = g.cards[0]
    fast = gpu_plan.card_plan(g, card, runs, 46, 450.0, ARMS)
    card.min_step_s.value = 0.1  # a 100 ms step: 2,000 warm-up steps take at least 200 s
    slow = gpu_plan.card_plan(g, card, runs, 46, 450.0, ARMS)
    warm = {name: s for name, s, _ in slow.parts}["warm-up"]
    assert warm >= runs.warmup_steps * 0.1 > {name: s for name, s, _ in fast.parts}["warm-up"]
    assert slow.tokens_per_s == pytest.approx(runs.rows * runs.seq / 0.1) and slow.first_window < fast.first_window


# ---------------------------------------------------------------------------------------------- the typed block
@pytest.mark.parametrize("edit, message", [
    (lambda g: g["analysis"].update(procedur="holm"), "experiment.gpu.analysis.procedur: no such key; did you mean "
                                                      "experiment.gpu.analysis.procedure?"),
    (lambda g: g["window"].update(margin_s="soon"), "experiment.gpu.window.margin_s='soon': expected float"),
    (lambda g: g["analysis"].update(procedure="bonferoni"), "experiment.gpu.analysis.procedure='bonferoni': allowed holm"),
    (lambda g: g["warmup"].update(policy="each"), "experiment.gpu.warmup.policy='each': allowed carried, per_window"),
    (lambda g: g["cards"][0]["reference"].pop("rows"), "experiment.gpu.cards[0].reference.rows is missing"),
])
def test_a_bad_gpu_block_is_one_line_naming_the_key(edit, message) -> None:
    from femlm.experiment.gpu_schema import check

    raw = copy.deepcopy(load("study_gpu").raw)
    edit(raw["gpu"])
    with pytest.raises(UserError) as err:
        check(parse(Experiment, raw, "study_gpu.yaml", "experiment").gpu, "study_gpu.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_misspelt_key_in_the_file_exits_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from femlm.experiment import cli, schema

    text = (schema.conf_dir() / "study_gpu.yaml").read_text().replace("      margin_s: 30", "      margn_s: 30")
    (tmp_path / "study_gpu.yaml").write_text(text)
    monkeypatch.setattr(schema, "conf_dir", lambda: tmp_path)
    assert cli.main(["study_gpu", "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "experiment.gpu.window.margn_s: no such key" in err


# ---------------------------------------------------------------------------------------------- windows
def _record(seed: int, code: str = "c0", losses: dict[str, float] | None = None, status: str = "complete") -> dict:
    losses = losses or {a: 5.0 for a in ARMS}
    return {"seed": seed, "status": status, "failed_arms": [], "card": "NVIDIA H200", "window": "w1",
            "warmup_sha256": "w" * 64, "study_code": {"sha256": code, "sdpa_backend": "efficient", "torch": "2.13"},
            "seconds": {"arms": 20.0, "downstream": 0.0}, "downstream": {},
            "arms": {a: {"final_eval_loss": v, "first_eval_loss": 6.0, "row_tokens_per_s": 1e6,
                         "gate": {"passed": True, "warmup_loss": 6.0, "final_loss": v}} for a, v in losses.items()}}


def test_seeds_of_other_study_code_or_another_warmup_are_refused(tmp_path: Path) -> None:
    gpu_windows.write_seed(tmp_path, 1, _record(1), {})
    gpu_windows.check_pooling(tmp_path, {"sha256": "c0"}, "w" * 64)
    with pytest.raises(UserError, match="other study code .*sdpa_backend.*never pooled"):
        gpu_windows.check_pooling(tmp_path, {"sha256": "c1", "sdpa_backend": "flash", "torch": "2.13"}, "w" * 64)
    with pytest.raises(UserError, match="another warm-up"):
        gpu_windows.check_pooling(tmp_path, {"sha256": "c0"}, "v" * 64)
    with pytest.raises(UserError, match="never written again"):
        gpu_windows.write_seed(tmp_path, 1, _record(1), {})


def test_the_study_code_fingerprint_ignores_docstrings_but_not_code(tmp_path: Path) -> None:
    from femlm.runtime.config import RuntimeConfig

    for entry in gpu_windows.CODE:
        src = REPO / entry
        dst = tmp_path / entry
        if src.is_dir():
            dst.mkdir(parents=True)
            for f in src.glob("*.py"):
                (dst / f.name).write_text(f.read_text())
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(src.read_text())
    rt = RuntimeConfig()
    before = gpu_windows.study_code(rt, tmp_path)["sha256"]
    loop = tmp_path / "femlm/train/loop.py"
    loop.write_text(loop.read_text().replace('"""`run_pretrain`: the one', '"""`run_pretrain`: THE one'))
    assert gpu_windows.study_code(rt, tmp_path)["sha256"] == before
    loop.write_text(loop.read_text().replace("max_steps, every = core.max_steps", "max_steps, every = 1 + core.max_steps"))
    assert gpu_windows.study_code(rt, tmp_path)["sha256"] != before
    rt.sdpa_backend = "math"
    assert gpu_windows.study_code(rt, tmp_path)["sdpa_backend"] == "math"


def test_n_is_revised_once_upward_from_the_paired_sd_only(tmp_path: Path) -> None:
    g = load("study_gpu").gpu
    rng = np.random.default_rng(1)
    for seed in range(1, 6):  # paired SD ~0.03 > 0.0187: N goes up
        noise = rng.normal(0, 0.03, 2)
        losses = {"mlm_subword": 5.0, "fe_passes_subword": 5.0 + noise[0], "fe_subword": 5.2 + noise[1]}
        gpu_windows.write_seed(tmp_path, seed, _record(seed, losses=losses), {})
    line = gpu_windows.maybe_revise(tmp_path, g, "mlm_subword", ARMS[1:], [0.01, 0.01], "w1")
    rev = gpu_windows.revision(tmp_path)
    assert line and rev["n"] > 46 == rev["n_declared"]
    # the mean shift of fe_subword (+0.2) does not enter: only the SDs
    sds = gpu_windows.paired_sds(gpu_windows.records(tmp_path), "mlm_subword", ARMS[1:])
    assert rev["sd_used"] == pytest.approx(max(sds.values()))
    gpu_windows.write_seed(tmp_path, 6, _record(6), {})
    assert gpu_windows.maybe_revise(tmp_path, g, "mlm_subword", ARMS[1:], [0.01, 0.01], "w2") is None  # never again


def test_prepared_data_is_reused_only_when_its_settings_are_equal(tmp_path: Path) -> None:
    from femlm.study import gpu_data

    exp = load("study_gpu", smoke=True)
    folder = tmp_path / "data"
    folder.mkdir()
    settings = gpu_data.settings(exp)
    (folder / "data.json").write_text(json.dumps({"settings": settings, "corpora": {}}))
    assert gpu_data.prepared(exp, tmp_path) is not None
    other = copy.deepcopy(settings)
    other["arms"]["domain"]["max_documents"] = 21
    (folder / "data.json").write_text(json.dumps({"settings": other}))
    assert gpu_data.prepared(exp, tmp_path) is None
    with pytest.raises(UserError, match=r"prepared with other settings \(arms differ"):
        gpu_data.load(exp, tmp_path)


def test_a_modernbert_checkpoint_keeps_the_prepared_tokenizer_though_it_loads_as_another_class(
        w, tmp_path: Path) -> None:
    """transformers loads a ModernBERT directory's tokenizer as its generic class: the same ids, accepted; another
    vocabulary is refused."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from femlm.data.config import DownloadConfig
    from femlm.data.prepare import tokenizer_fingerprint
    from femlm.models.load import load_tokenizer
    from femlm.study.gpu_data import Data
    from helpers.tiny import tiny_tokenizer

    folder = tmp_path / "data"
    tiny_tokenizer(folder / "tokenizer", words=20)
    ours = load_tokenizer(str(folder / "tokenizer"), DownloadConfig(offline=True))
    data = Data(folder, {"tokenizer": tokenizer_fingerprint(ours)})
    config = AutoConfig.for_model("modernbert", vocab_size=25, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, pad_token_id=0, cls_token_id=2,
                                  sep_token_id=3, bos_token_id=2, eos_token_id=3)
    for name, words in (("same", 20), ("other", 21)):
        AutoModelForMaskedLM.from_config(config).save_pretrained(tmp_path / name)
        ours.save_pretrained(tmp_path / name) if name == "same" else \
            tiny_tokenizer(tmp_path / "tok_other", words).save_pretrained(tmp_path / name)
    w.check_tokenizer(tmp_path / "same", data)
    with pytest.raises(UserError, match="tokenizer is not the one"):
        w.check_tokenizer(tmp_path / "other", data)


# ---------------------------------------------------------------------------------------------- the README
def _warmup(out: Path, passed: bool = True) -> None:
    (out / "warmup").mkdir(parents=True)
    gate = {"passed": passed, "loss": 4.9, "baseline": 6.2, "margin": 1.0, "below_baseline": 1.3}
    (out / "warmup" / "warmup.json").write_text(json.dumps({
        "gate": gate, "passed": passed, "card": "NVIDIA H200", "window": "w1", "domain": "wikipedia",
        "baseline": {"unigram_loss": 6.9, "targets": 1000}, "checkpoint_sha256": "a" * 64}))


def test_before_n_the_readme_shows_gates_count_speeds_and_cards_and_nothing_that_compares(w, tmp_path: Path) -> None:
    from femlm.study.gpu_results import write_results

    out = tmp_path / "out"
    _warmup(out)
    for seed in (1, 2, 3):
        gpu_windows.write_seed(out, seed, _record(seed, losses={"mlm_subword": 5.1234, "fe_passes_subword": 5.0111,
                                                                "fe_subword": 5.3999}), {})
    readme = write_results(w.exp, w.plan, out, {"window": "w1", "card": "NVIDIA H200", "parts_s": {"seeds": 60.0},
                                                 "seeds": [{"seed": 1, "status": "complete"}]}).read_text()
    assert "**3 of 46 seeds.**" in readme and "passed" in readme and "NVIDIA H200" in readme
    assert "row tokens/s" in readme and "9 of 9 runs ended below" in readme
    body = readme.split("## Where the study stands")[1]  # after the declarations (which say how it will read)
    for word in ("5.1234", "5.0111", "5.3999", "favours", "against FE", "**not decided**", "Holm-adjusted", "[-"):
        assert word not in body
    study = json.loads((out / "study.json").read_text())
    assert study["comparisons"] is None and not study["decided_at_n"] and not (out / "comparisons.csv").exists()


def test_a_stopped_study_reads_not_decided(w, tmp_path: Path) -> None:
    from femlm.study.gpu_results import write_results

    out = tmp_path / "out"
    _warmup(out, passed=False)
    readme = write_results(w.exp, w.plan, out).read_text()
    assert "**Not decided: the study stopped** at the warm-up's gate" in readme and "**failed**" in readme


# ---------------------------------------------------------------------------------------------- the smoke study
@pytest.mark.slow
def test_the_smoke_study_runs_end_to_end_through_the_loop_and_a_later_window_continues(tmp_path: Path) -> None:
    if not MIRROR.is_dir():
        pytest.skip("needs the data mirror at ../shared/data")
    env = {**os.environ, "FEMLM_MIRROR": str(MIRROR), "FEMLM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "femlm.experiment", "study_gpu", "--smoke", "--runs", str(tmp_path / "runs"),
           "--out", str(out)]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "N = 3 paired seeds" in first.stdout and "3 seeds kept now; 3 of 3 complete" in first.stderr
    study = json.loads((out / "study.json").read_text())
    assert study["seeds_complete"] == [1, 2, 3] and study["decided_at_n"] and study["warmup"]["passed"]
    # every run went through the loop: the CLI's files, the seed as cfg.seed, the fingerprints
    arm = out / "seeds" / "seed_002" / "fe_passes_subword"
    summary = json.loads((arm / "summary.json").read_text())
    assert summary["vocabulary_sha256"] and summary["corpus"]["sha256"]["train"]
    assert "seed: 2" in (arm / "config.yaml").read_text() and json.loads((arm / "run.json").read_text())["packages"]
    record = json.loads((out / "seeds" / "seed_001" / "seed.json").read_text())
    assert set(record["downstream"]) == set(ARMS) and "collapsed" in record["downstream"]["fe_subword"]["aclarc"]
    assert (out / "warmup" / "checkpoint" / "config.json").is_file() and "Downstream (secondary" in \
        (out / "README.md").read_text()
    # A window cut in seed 3 keeps seeds 1 and 2; the next (without the mirror) trains seed 3 alone, identically.
    before = json.loads((out / "seeds" / "seed_003" / "seed.json").read_text())
    import shutil

    shutil.rmtree(out / "seeds" / "seed_003")
    again = subprocess.run(cmd, env={**env, "FEMLM_MIRROR": ""}, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "carried warm-up" in again.stderr and "1 seeds kept now; 3 of 3 complete" in again.stderr
    after = json.loads((out / "seeds" / "seed_003" / "seed.json").read_text())
    assert {a: r["final_eval_loss"] for a, r in after["arms"].items()} == \
        {a: r["final_eval_loss"] for a, r in before["arms"].items()}
    assert len((out / "windows.jsonl").read_text().splitlines()) == 2
