"""The GPU study (`make study-gpu`: python -m femlm.experiment study_gpu; issue 45): one window per invocation.

Every run goes through femlm's one training loop (femlm.train.loop.run_pretrain) in this one process, in a run
directory of its own with what the CLI writes (config.yaml, run.json, metrics.jsonl, summary.json with the corpus's
and the vocabulary's fingerprints), on the data the study prepared (femlm.study.gpu_data), with the window's
deadline. Four steps for the runner:

* prepare: the vocabulary, both corpora and the tasks' files into <runs>/data (beside the mirror), or checked;
* warm-up: the carried checkpoint <out>/warmup/checkpoint checked against its sha256, or (the first window) the
  warm-up trained, its gate checked (femlm.study.gpu_gates) and, passed, the checkpoint kept there to be
  committed and carried to every later window;
* seeds: seed after seed (the next not yet kept, up to N), every arm continued from the warm-up checkpoint, each
  arm's gate, the downstream tasks for the first `gpu.downstream.pretrain_seeds` seeds, the seed kept at once
  (femlm.study.gpu_windows); a seed starts only when its time fits before the deadline, and the loop's deadline
  check drops a seed that does not finish;
* results: femlm.study.gpu_results over the kept seeds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from femlm.errors import UserError
from femlm.experiment.schema import Experiment
from femlm.experiment.step import Step
from femlm.experiment.tables import Options
from femlm.study import gpu_configs as configs
from femlm.study import gpu_data, gpu_gates, gpu_plan, gpu_windows
from femlm.study.driver import summaries_step


def card_name() -> str:
    import torch

    from femlm.runs import cpu_model

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({cpu_model()})"


def checkpoint_sha256(folder: Path) -> tuple[str, dict[str, str]]:
    """One digest over the checkpoint's files (names and contents), and each file's."""
    from femlm.data.tokens import file_sha256

    files = {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(), files


def train(composed: configs.Composed, run_dir: Path, prepared: Any, deadline: float) -> dict[str, Any]:
    """One pre-training run through the loop, in a run directory of its own (an earlier cut one is removed)."""
    from femlm.config import command_config
    from femlm.runs import start_run
    from femlm.train.loop import run_pretrain

    shutil.rmtree(run_dir, ignore_errors=True)
    run = start_run(command_config(composed.node, composed.command), run_dir, composed.command)
    return run_pretrain(composed.cfg, run, prepared=prepared, deadline=deadline)


class Window:
    """One invocation of the study: its data, plan, deadline and what each step did (out/windows.jsonl)."""

    def __init__(self, exp: Experiment, opts: Options) -> None:
        self.exp, self.g = exp, exp.gpu
        self.runs = (opts.runs or opts.root / exp.runs_dir).resolve()
        self.out = (opts.out or opts.root / exp.out_dir).resolve()
        self.warm_dir = self.out / "warmup"
        self.stamp = opts.stamp
        self.record: dict[str, Any] = {"window": opts.stamp, "parts_s": {}, "seeds": []}
        # the configs the plan reads (composed once: they do not change within a window)
        self.composed = (configs.warmup(exp), configs.arms(exp), {t: configs.finetune(exp, t) for t in exp.finetune.tasks})
        self.plan = self.make_plan()

    # ------------------------------------------------------------------------------------------ plan
    def make_plan(self) -> gpu_plan.Plan:
        data = gpu_data.prepared(self.exp, self.runs)
        counts, counted = ((data.counts(), "prepared") if data is not None else
                           ({k: getattr(self.g.expected, k) for k in ("warmup_train_blocks", "warmup_validation_blocks",
                                                                       "arms_train_blocks", "arms_validation_blocks")},
                            "expected: not prepared yet"))
        runs = gpu_plan.read_runs(*self.composed, counts, counted)
        revised, recs = gpu_windows.revision(self.out), gpu_windows.records(self.out)
        return gpu_plan.make_plan(self.g, float(self.exp.estimate.budget_minutes), runs, self.exp.pretrain.arms,
                                  self.deltas(), counts, done=len(gpu_windows.complete(recs)),
                                  warmup_done=self.warmup_info().get("passed", False),
                                  revised_sd=revised["sd_used"] if revised else None,
                                  measured=gpu_plan.measured_pace(recs))

    def deltas(self) -> list[float]:
        """Each declared member's equivalence margin (stats.delta), in the family's order."""
        return [float(self.exp.stats.delta[k]) for k in self.exp.stats.confirmatory if k in self.exp.stats.delta]

    def deadline(self, runner: Any) -> float:
        return runner.start + float(self.exp.estimate.budget_minutes) * 60 - self.g.window.margin_s

    def card_plan(self) -> gpu_plan.CardPlan:
        name = card_name()
        return next((c for c in self.plan.cards if c.card == name), self.plan.cards[0])

    def timed(self, part: str, action: Any) -> Any:
        def run(runner: Any) -> str:
            t0 = time.time()
            try:
                return action(runner)
            finally:
                self.record["parts_s"][part] = round(time.time() - t0, 1)
        return run

    # ------------------------------------------------------------------------------------------ warm-up
    def warmup_info(self) -> dict[str, Any]:
        return gpu_windows.warmup_record(self.out)

    def carried(self) -> str:
        """The carried checkpoint's sha256, checked against the one its warm-up recorded."""
        info, ckpt = self.warmup_info(), self.warm_dir / "checkpoint"
        if not ckpt.is_dir():
            raise UserError(f"{ckpt}: the warm-up checkpoint recorded in {self.warm_dir / 'warmup.json'} is missing "
                            "(restore it from the repository: it is committed and carried to every window)")
        digest, _ = checkpoint_sha256(ckpt)
        if digest != info["checkpoint_sha256"]:
            raise UserError(f"{ckpt}: sha256 {digest[:12]} differs from the warm-up's recorded "
                            f"{info['checkpoint_sha256'][:12]} (warmup.json): the checkpoint was changed")
        return digest

    def warmup(self, runner: Any) -> str:
        from femlm.models.load import load_tokenizer
        from femlm.train.loop import DeadlineReached

        self.plan = self.make_plan()  # with the prepared data's counts
        self.plan.refuse()
        info = self.warmup_info()
        if info:
            if not info["passed"]:
                return "the warm-up failed its gate in an earlier window: the study stopped (no arms)"
            return f"carried warm-up {self.carried()[:12]} (gate passed: {info['gate']['below_baseline']:.3f} nats " \
                   "below the context-free baseline)"
        data = gpu_data.load(self.exp, self.runs)
        composed = configs.warmup(self.exp, data.tokenizer)
        run_dir = self.runs / "warmup"
        try:
            summary = train(composed, run_dir, data.corpus("warmup"), self.deadline(runner))
        except DeadlineReached:
            shutil.rmtree(run_dir, ignore_errors=True)
            return "the warm-up was cut by the window's deadline: no result (the next window trains it again)"
        tokenizer = load_tokenizer(str(data.tokenizer), composed.cfg.download)
        base = gpu_gates.baseline_for(composed.cfg, data.corpus("warmup"), tokenizer)
        gate = gpu_gates.warmup_gate(summary["final_eval_loss"], base["loss"], self.g.gates.warmup_margin)
        tmp = self.warm_dir.with_name("warmup.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "run").mkdir(parents=True)
        for f in gpu_windows.LIGHT:
            shutil.copy2(run_dir / f, tmp / "run" / f)
        record = {"gate": gate, "baseline": base, "card": card_name(), "window": self.stamp,
                  "domain": composed.cfg.domain.name,
                  "study_code": gpu_windows.study_code(composed.cfg.runtime), "passed": gate["passed"],
                  "summary": {k: summary.get(k) for k in ("steps", "first_eval_loss", "final_eval_loss",
                                                          "final_eval_accuracy", "row_tokens_per_s", "train_s",
                                                          "wall_s", "vocabulary_sha256", "corpus")}}
        if gate["passed"]:
            shutil.copytree(run_dir / "checkpoints" / "final", tmp / "checkpoint")
            record["checkpoint_sha256"], record["checkpoint_files"] = checkpoint_sha256(tmp / "checkpoint")
        (tmp / "warmup.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        shutil.rmtree(self.warm_dir, ignore_errors=True)
        tmp.rename(self.warm_dir)
        verdict = "passed" if gate["passed"] else f"FAILED ({self.g.gates.on_warmup_fail})"
        return (f"warm-up: held-out loss {summary['final_eval_loss']:.4f} against the context-free baseline "
                f"{base['loss']:.4f} (unigram {base['unigram_loss']:.4f}): gate {verdict}")

    # ------------------------------------------------------------------------------------------ seeds
    def seeds(self, runner: Any) -> str:
        from femlm.train.loop import DeadlineReached

        self.plan = self.make_plan()
        self.plan.refuse()
        info = self.warmup_info()
        if not info.get("passed"):
            return "no seeds: " + ("the warm-up failed its gate" if info else "no warm-up checkpoint")
        warm_sha = self.carried()
        data = gpu_data.load(self.exp, self.runs)
        ckpt = self.warm_dir / "checkpoint"
        self.check_tokenizer(ckpt, data)
        code = gpu_windows.study_code(configs.arm(self.exp, self.exp.pretrain.reference, 1, ckpt).cfg.runtime)
        gpu_windows.check_pooling(self.out, code, warm_sha)
        recs = gpu_windows.records(self.out)
        if gpu_windows.failed(recs):
            return f"no seeds: seed {gpu_windows.failed(recs)[0]['seed']} failed a gate, the study stopped"
        todo = [s for s in range(1, self.plan.n + 1) if not gpu_windows.seed_dir(self.out, s).exists()]
        deadline, kept, card = self.deadline(runner), [], self.card_plan()
        pace = next(s for name, s, _ in card.parts if name == "one seed's arms")
        ft = next(s for name, s, _ in card.parts if name == "one seed's downstream")
        for seed in todo:
            need = pace + (ft if seed <= self.g.downstream.pretrain_seeds else 0)
            if time.time() + need > deadline:
                runner.log(f"seed {seed} not started: ~{need:.0f} s would pass the window's deadline")
                break
            where = self.runs / "seeds" / f"seed_{seed:03d}"
            try:
                record, dirs = self.one_seed(seed, data, ckpt, warm_sha, code, deadline)
            except DeadlineReached as err:
                shutil.rmtree(where, ignore_errors=True)
                runner.log(f"seed {seed} cut by the deadline ({err}): no result; it runs again in the next window")
                break
            gpu_windows.write_seed(self.out, seed, record, dirs)
            shutil.rmtree(where, ignore_errors=True)  # checkpoints: nothing reads them once the seed is kept
            self.record["seeds"].append({"seed": seed, "status": record["status"], **record["seconds"]})
            # no arm's loss before N (femlm.study.gpu_results): the gates only
            runner.log(f"seed {seed} {record['status']}: " + ", ".join(
                f"{a} {'below' if r['gate']['passed'] else 'NOT below'} the warm-up's ACL loss"
                for a, r in record["arms"].items()) + f" ({record['seconds']['arms']:.0f} s arms, "
                f"{record['seconds']['downstream']:.0f} s downstream)")
            kept.append(seed)
            if record["status"] == "failed":
                runner.log(f"seed {seed} failed a gate: {self.g.gates.on_arm_fail}")
                break
            pace = record["seconds"]["arms"]  # the pace measured on this machine decides whether the next seed fits
            ft = record["seconds"]["downstream"] or ft
        revised = gpu_windows.maybe_revise(self.out, self.g, self.exp.pretrain.reference,
                                           [a for a in self.exp.pretrain.arms if a != self.exp.pretrain.reference],
                                           self.deltas(), self.stamp)
        done = len(gpu_windows.complete(gpu_windows.records(self.out)))
        return f"{len(kept)} seeds kept now; {done} of {self.plan.n} complete" + (f"; {revised}" if revised else "")

    def check_tokenizer(self, ckpt: Path, data: gpu_data.Data) -> None:
        """The checkpoint's tokenizer splits text as the prepared data's did: the same tokenizer JSON (the class
        it loads as may differ: femlm.data.prepare.splitting_fingerprint), the data's own unchanged."""
        from femlm.data.config import DownloadConfig
        from femlm.data.prepare import splitting_fingerprint, tokenizer_fingerprint
        from femlm.models.load import load_tokenizer

        offline = DownloadConfig(offline=True)
        ours = load_tokenizer(str(data.tokenizer), offline)
        if tokenizer_fingerprint(ours) != data.info["tokenizer"] or \
                splitting_fingerprint(load_tokenizer(str(ckpt), offline)) != splitting_fingerprint(ours):
            raise UserError(f"{ckpt}'s tokenizer is not the one {data.folder} was prepared with: prepare the data "
                            "again from the same experiment file")

    def one_seed(self, seed: int, data: gpu_data.Data, ckpt: Path, warm_sha: str, code: dict[str, Any],
                 deadline: float) -> tuple[dict[str, Any], dict[str, Path]]:
        from femlm.study.gpu_downstream import finetune_arm
        from femlm.train.loop import DeadlineReached, TrainingDiverged

        where = self.runs / "seeds" / f"seed_{seed:03d}"
        shutil.rmtree(where, ignore_errors=True)
        arms, dirs, t0 = {}, {}, time.time()
        for arm in self.exp.pretrain.arms:
            composed = configs.arm(self.exp, arm, seed, ckpt)
            try:
                summary = train(composed, where / arm, data.corpus("arms"), deadline)
            except TrainingDiverged as err:
                arms[arm] = {"gate": {"passed": False, "why": str(err)}}
                continue
            arms[arm] = {**{k: summary.get(k) for k in ("first_eval_loss", "final_eval_loss", "final_eval_accuracy",
                                                        "row_tokens_per_s", "steps", "rows_per_step",
                                                        "sequences_per_step", "train_s", "wall_s")},
                         "passes": summary["seen"]["sequences"] / data.counts()["arms_train_blocks"],
                         "gate": gpu_gates.arm_gate(summary)}
            dirs[arm] = where / arm
        failed = [a for a, r in arms.items() if not r["gate"]["passed"]]
        seconds = {"arms": round(time.time() - t0, 1), "downstream": 0.0}
        downstream: dict[str, Any] = {}
        error = None
        if not failed and seed <= self.g.downstream.pretrain_seeds:
            try:
                for arm in self.exp.pretrain.arms:
                    scores, runs = finetune_arm(self.exp, where / arm / "checkpoints" / "final", data.mirror,
                                                where / "downstream" / arm, deadline)
                    downstream[arm] = scores
                    dirs.update({f"downstream/{arm}/{t}": d for t, d in runs.items()})
            except DeadlineReached:
                raise
            except Exception as err:  # noqa: BLE001 - the secondary part never costs the primary its seed
                downstream, error = {}, f"{type(err).__name__}: {err}"
            seconds["downstream"] = round(time.time() - t0 - seconds["arms"], 1)
        record = {"seed": seed, "status": "failed" if failed else "complete", "failed_arms": failed,
                  "arms": arms, "downstream": downstream, "downstream_error": error, "study_code": code, "warmup_sha256": warm_sha,
                  "card": card_name(), "window": self.stamp, "seconds": seconds}
        return record, dirs

    # ------------------------------------------------------------------------------------------ results
    def results(self, runner: Any) -> str:
        from femlm.study.gpu_results import write_results

        self.plan = self.make_plan()  # the seeds and the revision as they stand now
        self.record["card"] = card_name()
        return str(write_results(self.exp, self.plan, self.out, self.record if self.record["parts_s"] else None))


def pipeline(exps: list[Experiment], opts: Options) -> list[Step]:
    (exp,) = exps
    w = Window(exp, opts)
    print(w.plan.text(), flush=True)
    card = w.plan.cards[0]
    seconds = {name: s for name, s, _ in card.parts}

    def step(name: str, part: str, estimate: float, action: Any) -> Step:
        return Step(name, part, w.runs, kind="inprocess", estimate_s=estimate, action=w.timed(part, action),
                    home=w.runs)

    return [step("prepare the data", "prepare", seconds["start-up"], lambda r: gpu_data.prepare(exp, w.runs)),
            step("warm-up (or the carried checkpoint)", "warmup", seconds["warm-up"], w.warmup),
            step(f"seeds up to N = {w.plan.n}", "seeds", seconds["one seed's arms"] * card.later_window, w.seeds),
            step("results", "results", seconds["results"], w.results),
            *summaries_step({**exp.raw, "smoke": opts.smoke}, w.out, None, w.runs, opts)]
