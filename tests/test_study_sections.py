"""The decomposition's readings and sections (issues 27 and 37): femlm/study/sections.py, ratios.py and
verdicts.py on hand-made study fragments.

Each case builds the decomposition.json a run would leave (or a pre-training comparison) with known numbers and
checks the reading femlm gives it (a prediction reads lower / higher, never for or against FE; not decided; gated:
out of range, too few units, heavy-tailed) and what its sections print. No run, no file: pure functions of the fragments.
"""

from __future__ import annotations

import copy
import csv
import re
from typing import Any

from femlm.study.ratios import ratio_rows, ratio_section, side_by_side
from femlm.study.sections import decomposition_section, fmt_ratio
from femlm.study.verdicts import HIGHER, LOWER, UNDECIDED, adjust, study_comparisons


def term(value: float, ci: list[float]) -> dict[str, Any]:
    return {"estimate": value, "ci": ci}


def fragment(ratio: float = 0.9, ci: tuple[float, float] = (0.85, 0.95), pool: int = 40, sigma_d2: float = 0.4,
             sigma_m2: float = 4.7, sigma_m2_fe: float = 5.0, seqs: int = 12, d2: float = 50.0,
             share: float = 0.6, residual_ci: tuple[float, float] = (3.0, 6.0)) -> dict[str, Any]:
    """A decomposition.json with one K (4): FE / MLM per unit compute ``ratio [ci]``."""
    fe = {"per_compute_vs_mlm": ratio, "ci": list(ci), "verdict": "(interval reading)",
          "c_plus_sigma_d2": -0.1, "c_plus_sigma_d2_ci": [-0.2, -0.05], "measured_same_rows": None,
          "measured_same_rows_ci": [None, None], "measured_same_sequences": None,
          "measured_same_sequences_ci": [None, None]}
    iid = {**fe, "per_compute_vs_mlm": 1.1, "ci": [1.05, 1.15], "verdict": "i.i.d. increases"}
    null = {"measured_decrease": 11.9, "measured_decrease_ci": [10.7, 13.0], "additive_decrease": 7.5,
            "additive_decrease_ci": [6.7, 8.4], "residual_decrease": 4.4, "residual_decrease_ci": [3.1, 5.8],
            "fraction_explained": 0.63, "fraction_explained_ci": [0.55, 0.72], "residual_rho_bins": -0.9,
            "var_single": 11.4, "additive_share_of_var": share, "d2_mean": d2,
            "by_sequence": {"unit": "sequences", "count": seqs, "residual_decrease_ci": list(residual_ci),
                            "measured_decrease_ci": [10.0, 13.5], "additive_decrease_ci": [6.0, 9.0],
                            "fraction_explained_ci": [0.5, 0.75]}}
    return {"settings": {"pool": pool, "tau": 15, "batch_rows": 16, "num_masks": [4], "check_batches": 0,
                         "block_size": 128},
            "sequences": {"n_valid": [126] * max(pool, seqs)},
            "parameters": {"patterns": ["*layer.0.attention.self.query.weight"], "numel": 147456},
            "terms": {"sigma_d2": term(sigma_d2, [sigma_d2 * 0.8, sigma_d2 * 1.2]),
                      "sigma_m2": term(sigma_m2, [sigma_m2 * 0.9, sigma_m2 * 1.1]),
                      "sigma_m2_from_fe_masks": term(sigma_m2_fe, [sigma_m2_fe * 0.9, sigma_m2_fe * 1.1]),
                      "c_fe": term(-0.5, [-0.6, -0.4]), "c_iid": term(0.0, [-0.1, 0.1])},
            "verdicts": {"4": {"fe": fe, "iid": iid, "fe_vs_iid": {"ratio": 0.9, "ci": [0.8, 0.95]}}},
            "null_model": {"summary": null, "settings": {"sequences": seqs, "tau": 15, "pairs": 64, "groups": 12,
                                                         "group_size": 4}}}


def readings_of(j: dict[str, Any], **d: Any) -> tuple[Any, Any]:
    """(FE / MLM variance at K=4, the null model's residual decrease) of one decomposition run, read: each the one
    member of its family, so its 95% interval is at the family's level (no bootstrap replicates here)."""
    plan: dict[str, Any] = {"name": "s", "stats": {"declared": {"when": "before", "date": "2026-11-27"},
                                                   "confirmatory": ["variance_ratio/warmup/K4"]}}
    comps = {c.kind: c for c in adjust(study_comparisons(plan, {"warmup": {"json": j, **d}}, {}, {}, []), plan)}
    return comps["variance_ratio"], comps["context"]


def test_a_prediction_below_one_reads_lower_and_never_for_fe() -> None:
    var, ctx = readings_of(fragment(0.9, (0.85, 0.95)))
    assert (var.reading, var.low, var.high, var.n) == (LOWER, 0.85, 0.95, 40) and not var.about_fe
    assert var.nature == "prediction" and var.p is None  # a bootstrap without replicates: no p
    assert "predicted by the decomposition at tau = 15" in var.text
    assert ctx.reading == "higher" and not ctx.about_fe and (ctx.low, ctx.high) == (3.0, 6.0)


def test_a_prediction_above_one_reads_higher() -> None:
    var, _ = readings_of(fragment(1.05, (1.03, 1.08)))
    assert var.reading == HIGHER and var.why == "higher than 1"
    text = "\n".join(decomposition_section({"warmup": {"json": fragment(1.05, (1.03, 1.08))}},
                                           readings={var.key: var}))
    assert "higher (a prediction, not a training outcome)" in text and "against FE" not in text


def test_an_interval_containing_the_null_is_not_decided() -> None:
    var, ctx = readings_of(fragment(1.0, (0.93, 1.15), residual_ci=(-0.5, 2.0)))
    assert var.reading == ctx.reading == UNDECIDED
    assert "ratios outside [0.930, 1.150] excluded" in var.why and "differences larger than 2 excluded" in ctx.why


def test_out_of_range_estimates_are_not_measured() -> None:
    j = fragment(0.95, (0.90, 0.99), sigma_d2=-0.08, d2=-7.29, share=-0.29)
    var, ctx = readings_of(j)
    assert var.reading == ctx.reading == UNDECIDED  # an interval below 1, but gated
    assert var.why.startswith("not measured: sigma_d2") and var.p_adjusted is None
    assert "D2" in ctx.why and "outside [0, 1]" in ctx.why
    text = "\n".join(decomposition_section({"warmup": {"json": j}}))
    assert "not measured" in text and "0.95 [0.9, 0.99]" in text  # the numbers stay, beside the reason


def test_too_few_units_print_no_interval_and_no_verdict() -> None:
    j = fragment(0.9, (0.85, 0.95), pool=4, seqs=4)
    var, ctx = readings_of(j)
    assert var.reading == ctx.reading == UNDECIDED
    assert "too few units: 4 pool sequences" in var.why and "too few units: 4 sequences" in ctx.why
    text = "\n".join(decomposition_section({"warmup": {"json": j}}))
    assert "[0.85" not in text and "95% CI" not in text and "no intervals: 4 pool sequences" in text


def test_heavy_tails_are_not_measured() -> None:
    """sigma_m2 23.3 against 5.85 from the FE masks (the 0.30 run of study-base): a factor 4."""
    var, _ = readings_of(fragment(0.9, (0.85, 0.95), sigma_m2=23.3, sigma_m2_fe=5.85))
    assert var.reading == UNDECIDED and "two unbiased estimates of sigma_m2 disagree" in var.why


def test_a_null_model_sized_as_a_side_number_is_not_a_test() -> None:
    _, ctx = readings_of(fragment(), null_model="side")
    assert ctx.reading == UNDECIDED and "side number" in ctx.why


def test_units_are_stated() -> None:
    text = "\n".join(decomposition_section({"warmup": {"json": fragment()}}, model_parameters=22_700_000))
    assert "95% intervals over 40 pool sequences" in text
    assert "95% intervals over 12 sequences" in text
    assert "147,456 values, 0.65% of the model's 22.7M parameters" in text


def test_ratio_rows_per_run() -> None:
    runs = {"r15": {"json": fragment(0.9, (0.85, 0.95))},
            "r30": {"json": fragment(1.0, (0.99, 1.001), sigma_m2=23.3, sigma_m2_fe=5.85)},
            "seq512": {"json": fragment(0.98, (0.84, 1.05), pool=4)}}
    rows = ratio_rows(copy.deepcopy(runs))
    assert [r["pool_sequences"] for r in rows] == [40, 40, 4]
    assert [bool(r["not_measured"]) for r in rows] == [False, True, True]
    table = "\n".join(ratio_section(rows))
    assert "| 4 |" in table and "[0.84" not in table  # the 4-sequence run prints no interval


def test_censored_ratio_is_a_bound_not_an_interval() -> None:
    lower = {"estimate": 1.2, "low": 1.05, "high": 1.4, "n": 3, "bound": "lower", "method": "paired t",
             "not_reached": {"arm": 2, "reference": 0}, "verdict": "more compute (a lower bound)"}
    text = fmt_ratio(lower)
    assert text.startswith(">= 1.200") and "no interval" in text and "[1.05" not in text and "2 arm runs" in text
    assert text.endswith(": not decided")
    assert fmt_ratio({**lower, "bound": "both censored"}).startswith("not measured")
    plain = {**lower, "bound": ""}
    assert "1.200 [1.050, 1.400] (3 seeds" in fmt_ratio(plain)


def test_side_by_side_gates_an_old_study_json_by_its_plan() -> None:
    """results/study/study.json (MiniLM) predates the gates: 4 null-model sequences, from its plan's overrides."""
    old = {"plan": {"decomposition": {"overrides": ["analysis.pool=48", "analysis.sequences=4"]}},
           "null_model": {"warmup": fragment()["null_model"]["summary"]}, "decomposition_terms": {}}
    base = {"null_model": {"seq512": fragment()["null_model"]["summary"]}, "null_sequences": {"seq512": 12}}
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.json"
        path.write_text(json.dumps(old))
        table = "\n".join(side_by_side(base, path, {"terms": "", "null_model": "seq512"}))
    assert "not measured: too few units: 4 sequences" in table and "(12 sequences)" in table


def test_side_by_side_states_the_pool_of_each_term(tmp_path) -> None:
    """sigma_d2 and c_FE carry their unit: study.json's pool_sequences, or an older study's decomposition_<run>.md."""
    import json

    terms = {"sigma_d2": term(1.2, [1.1, 1.3]), "c_fe": term(-0.9, [-1.0, -0.8])}
    (tmp_path / "study.json").write_text(json.dumps({"decomposition_terms": {"warmup": terms}}))
    (tmp_path / "decomposition_warmup.md").write_text("Pool of 48 validation blocks of 128 tokens, tau = 15 ...\n")
    base = {"decomposition_terms": {"r15": terms}, "pool_sequences": {"r15": 40}}
    table = "\n".join(side_by_side(base, tmp_path / "study.json", {"terms": "r15", "null_model": ""}))
    assert table.count("(48 pool sequences)") == 2 and table.count("(40 pool sequences)") == 2


def test_drop_missing_figures(tmp_path) -> None:
    from femlm.study.readme import drop_missing_figures

    (tmp_path / "a.png").write_bytes(b"")
    text = "x\n![one](a.png)\n![two](b.png)\ny ![inline](b.png) stays\n"
    assert drop_missing_figures(text, tmp_path) == "x\n![one](a.png)\ny ![inline](b.png) stays\n"


def test_regenerate_the_minilm_readme_from_its_study_json(tmp_path) -> None:
    """results/study/ (MiniLM) regenerated without its run directories: the null model ran on 4 sequences, so no
    context-interaction reading may remain, and the censored same-sequences ratio is a bound; the summaries
    outside the folder are the runner's next step (headlines.refresh), never the writer's."""
    import shutil
    from pathlib import Path

    from femlm.study.headlines import refresh
    from femlm.study.plan import load_plan
    from femlm.study.regenerate import regenerate

    src = Path(__file__).resolve().parents[1] / "results" / "study"
    out = tmp_path / "results" / "study"
    shutil.copytree(src, out)
    evidence = tmp_path / "evidence.md"
    evidence.write_text("intro\n<!-- study:begin -->\nold\n<!-- study:end -->\nrest\n")
    top = tmp_path / "README.md"
    top.write_text("x\n<!-- evidence:begin -->\nold\n<!-- evidence:end -->\ny\n")
    plan = load_plan(False, "study")
    text = regenerate(plan, out).read_text()
    assert evidence.read_text().count("old") == 1 and "\nold\n" in top.read_text()  # nothing outside ``out``
    assert "context interactions detected" not in text
    assert text.count("not measured: too few units: 4 sequences") >= 2
    assert ">= 1.331 (a bound, no interval" in text
    assert "predicted by the decomposition at tau = 15" in text
    assert "primary, chosen after the data" in text and "confirmatory (declared before" not in text
    refresh(plan, out, evidence, top)
    block = evidence.read_text()
    assert block.startswith("intro\n<!-- study:begin -->") and block.endswith("<!-- study:end -->\nrest\n")
    assert "Holm at a family-wise 0.05" in block and "\nold\n" not in block
    assert regenerate(plan, out).read_text().replace(time_note(text), "") == text.replace(time_note(text), "")
    comps = list(csv.DictReader((out / "comparisons.csv").open(newline="")))
    conf = [r for r in comps if r["family"] == "primary"]
    assert len(conf) == len(plan["stats"]["confirmatory"])
    assert all(float(r["p_adjusted"]) >= float(r["p"]) for r in comps if r["p_adjusted"])
    (non_overlap,) = [r for r in conf if r["key"] == "fe_vs_control/same_rows/final_loss"]
    assert float(non_overlap["high"]) < 0 and float(non_overlap["p"]) < 0.05  # 3 seeds, p = 0.031 raw
    assert float(non_overlap["p_adjusted"]) >= 0.05 and non_overlap["reading"] == "not decided"
    assert int(non_overlap["seeds_needed"]) > 3 and "observed effect" in non_overlap["seeds_basis"]
    (variance,) = [r for r in conf if r["key"] == "variance_ratio/warmup/K4"]
    assert variance["p"] == "" and variance["nature"] == "prediction" and variance["reading"] == "not decided"
    # README.md's block: the declared family of the regenerated study, a table
    assert "FE-MLM evidence study" in top.read_text() and "| comparison | estimate [95% CI] | Holm p |" in top.read_text()
    assert "covariance_distribution_warmup.png" not in text
    assert all((out / m[1]).is_file() for m in re.finditer(r"^!\[[^\]]*\]\(([^)]+)\)$", text, re.M))
    assert "measured on this machine" not in text and "measured on 2 CPU cores (AMD EPYC" in text
    rows = list(csv.DictReader((out / "pretrain_comparisons.csv").open(newline="")))
    assert {r["quantity"] for r in rows} >= {"final_loss difference to iid_subword (paired)"}  # fe_vs_control too
    bounds = [r for r in rows if r["bound"]]
    assert bounds and all(r["low"] == r["high"] == r["p"] == "" for r in bounds)
    assert all(r["low"] and r["high"] for r in rows if r["quantity"].startswith("compute") and not r["bound"]
               and r["not_reached_arm"] == "0" and r["n"] != "1")


def time_note(text: str) -> str:
    """The regeneration note (it carries the date)."""
    return next(line for line in text.splitlines() if line.startswith("_Regenerated from"))
