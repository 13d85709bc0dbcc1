"""The numbers the paper reports, transcribed from its LaTeX source, and the tables' layouts.

Zheng, Shen, Shen, Chen and Xiao (2020), "Improving Self-supervised Pre-training via a Fully-Explored Masked
Language Model" (arXiv:2010.06040). Cells are kept as the text the paper prints ("63.0 ± 5.8") so that a
reader can check them against the PDF character for character; `parse_reported` turns them into numbers for
the CSV. Figures 2-4 and the split-number ablation are images in the paper: it gives no numbers for them, so
nothing is transcribed for those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CITATION = "Zheng et al. 2020"
REFERENCE = ("Zheng, Shen, Shen, Chen and Xiao (2020), Improving Self-supervised Pre-training via a "
             "Fully-Explored Masked Language Model, arXiv:2010.06040")


@dataclass(frozen=True)
class Column:
    """One column of a table: a header and the task keys whose cells it shows (MNLI-m/mm shows two)."""

    header: str
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class ReportedRow:
    label: str
    cells: dict[str, str]  # task key (or "avg") -> the text the paper prints
    citation: str  # where the paper took the number from (its own runs, or a cited paper)


# Task keys used across the report, and the names a results.json "task" may carry for each (normalised:
# lower case, letters and digits only). The first alias is the femlm task config name.
TASK_ALIASES: dict[str, tuple[str, ...]] = {
    "aclarc": ("aclarc", "citationintent"),
    "scierc": ("scierc", "sciie"),
    "hyperpartisan": ("hyperpartisan", "hyperpartisannews", "hp"),
    "agnews": ("agnews", "ag"),
    "mnli_m": ("mnli", "mnlim", "mnlimatched"),
    "mnli_mm": ("mnlimm", "mnlimismatched"),
    "sst2": ("sst2", "sst"),
    "qnli": ("qnli",),
    "qqp": ("qqp",),
    "rte": ("rte",),
    "mrpc": ("mrpc",),
    "cola": ("cola",),
    "stsb": ("stsb", "sts"),
}

CONTINUAL_COLUMNS = (Column("ACL-ARC", ("aclarc",)), Column("SciERC", ("scierc",)),
                  Column("HyperPartisan", ("hyperpartisan",)), Column("AGNews", ("agnews",)))
GLUE_COLUMNS = (Column("MNLI-m/mm", ("mnli_m", "mnli_mm")), Column("SST-2", ("sst2",)),
                  Column("QNLI", ("qnli",)), Column("QQP", ("qqp",)), Column("RTE", ("rte",)),
                  Column("MRPC", ("mrpc",)), Column("CoLA", ("cola",)), Column("STS-B", ("stsb",)))
# The nine GLUE dev numbers the paper averages in tab:average (MNLI counts twice: matched and mismatched;
# the FE-MLM row of the GLUE table, tab:eval_1, averages to 83.61, its tab:average entry 83.6).
GLUE_TASKS: tuple[str, ...] = tuple(t for c in GLUE_COLUMNS for t in c.tasks)
TASK_HEADERS: dict[str, str] = {"aclarc": "ACL-ARC", "scierc": "SciERC", "hyperpartisan": "HyperPartisan",
                                "agnews": "AGNews", "mnli_m": "MNLI-m", "mnli_mm": "MNLI-mm", "sst2": "SST-2",
                                "qnli": "QNLI", "qqp": "QQP", "rte": "RTE", "mrpc": "MRPC", "cola": "CoLA",
                                "stsb": "STS-B"}
CS_TASKS = ("aclarc", "scierc")
NEWS_TASKS = ("hyperpartisan", "agnews")

# femlm names the paper's tables by what they are: continual (continual pre-training), glue (GLUE dev) and
# glue_average; this is the one place that knows their LaTeX labels and printed numbers. The LaTeX source labels
# the continual pre-training table tab:eval_2 and the GLUE table tab:eval_1, but the compiled paper prints them in
# the other order (continual as Table 1, GLUE as Table 2), so titles and citations name both (`make
# reproduce-table2`, the paper's continual table by its source label, is `make reproduce-continual`).
TABLE_NAMES = {
    "continual": "Table 2 in the source's labels (tab:eval_2), printed as Table 1",
    "glue": "Table 1 in the source's labels (tab:eval_1), printed as Table 2",
    "glue_average": "Table 3 (tab:average), printed as Table 3",
}
PRINTED = {"continual": "Table 1", "glue": "Table 2", "glue_average": "Table 3"}


def cited(key: str) -> str:
    """'Zheng et al. 2020, Table 1 as printed (tab:eval_2)': a citation a reader holding the PDF can follow."""
    label = {"continual": "tab:eval_2", "glue": "tab:eval_1", "glue_average": "tab:average"}[key]
    return f"{CITATION}, {PRINTED[key]} as printed ({label})"


_GURURANGAN = f"Gururangan et al. 2020, as reported in {cited('continual')}"
_ZHENG_CONTINUAL = cited("continual")

# tab:eval_2 (printed as Table 1): continual pre-training of RoBERTa-base; mean ± std over fine-tuning seeds.
CONTINUAL_REPORTED: tuple[ReportedRow, ...] = (
    ReportedRow("RoBERTa (Gururangan et al. 2020)", {"aclarc": "63.0 ± 5.8", "scierc": "77.3 ± 1.9", "hyperpartisan": "86.6 ± 0.9",
                            "agnews": "93.9 ± 0.2"}, _GURURANGAN),
    ReportedRow("DAPT (Gururangan et al. 2020)", {"aclarc": "75.4 ± 2.5", "scierc": "80.8 ± 1.5", "hyperpartisan": "88.2 ± 5.9",
                         "agnews": "93.9 ± 0.2"}, _GURURANGAN),
    ReportedRow("MLM + Subword", {"aclarc": "75.34 ± 2.54", "scierc": "81.51 ± 1.05",
                                  "hyperpartisan": "91.00 ± 2.66", "agnews": "94.05 ± 0.16"}, _ZHENG_CONTINUAL),
    ReportedRow("FE-MLM + Subword", {"aclarc": "76.24 ± 1.86", "scierc": "82.40 ± 0.86",
                                     "hyperpartisan": "92.35 ± 3.49", "agnews": "94.02 ± 0.09"}, _ZHENG_CONTINUAL),
    ReportedRow("MLM + Span", {"aclarc": "76.63 ± 1.65", "scierc": "81.33 ± 1.16",
                               "hyperpartisan": "91.72 ± 3.26", "agnews": "93.94 ± 0.05"}, _ZHENG_CONTINUAL),
    ReportedRow("FE-MLM + Span", {"aclarc": "78.06 ± 2.31", "scierc": "81.99 ± 0.79",
                                  "hyperpartisan": "93.22 ± 3.31", "agnews": "94.13 ± 0.04"}, _ZHENG_CONTINUAL),
)

_ZHENG_GLUE = cited("glue")
# tab:eval_1 (printed as Table 2): GLUE dev, BERT-base pre-trained from scratch (1M steps, batch 256); no std given.
GLUE_REPORTED: tuple[ReportedRow, ...] = (
    ReportedRow("BERT (MLM)", {"mnli_m": "84.37", "mnli_mm": "84.85", "sst2": "92.78", "qnli": "91.01",
                               "qqp": "91.09", "rte": "63.54", "mrpc": "87.01", "cola": "59.65",
                               "stsb": "87.89"}, _ZHENG_GLUE),
    ReportedRow("BERT (FE-MLM)", {"mnli_m": "85.09", "mnli_mm": "84.63", "sst2": "93.23", "qnli": "91.01",
                                  "qqp": "91.16", "rte": "68.59", "mrpc": "87.99", "cola": "61.32",
                                  "stsb": "89.51"}, _ZHENG_GLUE),
)

_ZHENG_AVERAGE = cited("glue_average")
# tab:average (printed as Table 3): GLUE dev average. The baselines are the numbers Zheng et al. print, citing the
# original papers; "ReEval" is their re-evaluation of the released BERT-base.
GLUE_AVERAGE_REPORTED: tuple[ReportedRow, ...] = (
    ReportedRow("ELMo (Peters et al. 2018)", {"avg": "71.2"}, "Peters et al. 2018, as reported in " + _ZHENG_AVERAGE),
    ReportedRow("GPT (Radford et al. 2018)", {"avg": "78.8"}, "Radford et al. 2018, as reported in " + _ZHENG_AVERAGE),
    ReportedRow("BERT-base (Devlin et al. 2019)", {"avg": "82.2"}, "Devlin et al. 2019, as reported in " + _ZHENG_AVERAGE),
    ReportedRow("BERT-base (ReEval)", {"avg": "82.5"}, _ZHENG_AVERAGE),
    ReportedRow("MAP-Net (Chen et al. 2020)", {"avg": "82.1"}, "Chen et al. 2020, as reported in " + _ZHENG_AVERAGE),
    ReportedRow("BERT-base (FE-MLM)", {"avg": "83.6"}, _ZHENG_AVERAGE),
)

# The paper's settings, for the scale statement printed beside the reported rows.
PAPER_SCALE = {
    "continual": "RoBERTa-base continually pre-trained with batch 48, Adam lr 1e-4, sequence 512: ~40k steps on "
              "72k CS documents (of 2.22M), ~20k steps on 623k News documents (of 11.90M); 4 splits",
    "glue": "BERT-base pre-trained from scratch on Wikipedia + BookCorpus (16 GB), batch 256, 1M steps, "
              "Adam lr 1e-4, WordPiece vocabulary 30,522; GLUE dev sets",
    "glue_average": "average of the 9 GLUE dev numbers of the GLUE table (MNLI matched and mismatched count separately)",
}

# The paper's continual pre-training (CS) in tokens per arm: batch 48 x sequence 512 x ~40k steps (its Section 4.1;
# "around 40k steps"): what a study's scale is stated as a share of.
CONTINUAL_CS_TOKENS_PER_ARM = 40_000 * 48 * 512

_CELL = re.compile(r"^\s*(-?\d+(?:\.(\d+))?)\s*(?:±\s*(\d+(?:\.\d+)?))?\s*$")


def parse_reported(text: str) -> tuple[float, float | None, int]:
    """'75.34 ± 2.54' -> (75.34, 2.54, 2): mean, std (None when the paper gives none) and its decimals."""
    match = _CELL.match(text)
    if match is None:
        raise ValueError(f"not a reported cell: {text!r}")
    decimals = len(match.group(2) or "")
    std = float(match.group(3)) if match.group(3) is not None else None
    return float(match.group(1)), std, decimals


def normalise_task(name: str) -> str | None:
    """A results.json task name -> the report's task key (None when no table has that task)."""
    flat = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for key, aliases in TASK_ALIASES.items():
        if flat in aliases:
            return key
    return None


def reported_for_task(task: str) -> dict[str, str]:
    """The paper's printed cells for one task (row label -> text), for results.json's ``paper`` field; MNLI
    gives its matched and mismatched columns."""
    key = normalise_task(task)
    keys = ["mnli_m", "mnli_mm"] if key == "mnli_m" else [key] if key else []
    out: dict[str, str] = {}
    for row in (*CONTINUAL_REPORTED, *GLUE_REPORTED):
        for key in keys:
            if key in row.cells:
                suffix = f" ({TASK_HEADERS[key]})" if len(keys) > 1 else ""
                out[row.label + suffix] = row.cells[key]
    return out
