"""The registry's data: one `DatasetEntry` per dataset, corpus and tokenizer, with its files.

Each `FileEntry` has a relative ``path`` (the layout of a local mirror such as ``shared/data``, and of the
download cache), the ``url`` whose bytes match its ``sha256`` (for mirrored files: the public GitHub blob at
the pinned commit it was copied from, so a download can be verified), and, for archives, the ``member`` to
extract. A `DatasetEntry` records the canonical source the paper used (``source``; e.g. DAPT's S3 jsonl),
which is not always byte-identical to the pinned copy; see ``notes``. The checksums are the mirror
manifest's (``shared/data/MANIFEST.md``): hard-coding them is the point of a checksum. Look entries up
through `femlm.data.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from femlm.errors import UserError

DAPT_S3 = "https://s3-us-west-2.amazonaws.com/allennlp/dont_stop_pretraining/data"
GLUE_ZIP = "https://dl.fbaipublicfiles.com/glue/data"
HUB = "https://huggingface.co"


@dataclass(frozen=True)
class FileEntry:
    dataset: str
    role: str  # a split name (train, dev, test, dev_matched, ...) or a part (articles, classes, vocab, ...)
    path: str  # relative to the mirror root and to the cache root
    url: str | None  # where these exact bytes come from; None: not downloadable
    sha256: str | None = None  # None: unknown (not mirrored), used unverified
    size: int | None = None
    member: str | None = None  # path inside the archive at `url` (.zip, .tgz)
    optional: bool = False  # the dataset works without it (e.g. AG's train CSV)


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    group: str  # dapt | glue | corpora | tokenizers
    kind: str  # task | corpus | tokenizer
    title: str
    source: str  # canonical source the paper used
    format: str  # reader key, see femlm.data.readers / femlm.data.documents
    files: tuple[FileEntry, ...]
    text_fields: tuple[str, ...] = ()
    labels: tuple[str, ...] | None = None  # label strings as they appear in the files, in index order
    metric: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)  # expected examples per split (as loaded)
    notes: str = ""

    def file(self, role: str) -> FileEntry:
        for entry in self.files:
            if entry.role == role:
                return entry
        raise UserError(f"dataset {self.name} has no file for {role!r}: it has "
                        f"{', '.join(f.role for f in self.files)}")


def _gh(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def _f(dataset: str, role: str, path: str, url: str | None, sha256: str | None = None,
       size: int | None = None, member: str | None = None, optional: bool = False) -> FileEntry:
    return FileEntry(dataset, role, path, url, sha256, size, member, optional)


SCIBERT = ("allenai/scibert", "06793f77d7278898159ed50da30d173cdc8fdea9")
_SCIBERT_SHA = {
    ("citation_intent", "train"): ("58eef60d2bbfdabefc3de25191714f769db03134523ef67e87d864112c67908c", 465895),
    ("citation_intent", "dev"): ("bc456ac8caf40829dc2d3a44801a385ad8463c80682cbf002c19329b35812b5f", 30138),
    ("citation_intent", "test"): ("749d083cc3141d54a2bf1475c02a5a1c020c664601d55fe2829bdf85f06db4bb", 38637),
    ("sciie", "train"): ("83d395d97de2c02dcb4898af3c6e34b5f5aa19771298fbc9f69ae435fa1258fb", 823836),
    ("sciie", "dev"): ("9500a8e561f1ce50d972b8473525fe24ebae732bde653c381a4c65945965567a", 118354),
    ("sciie", "test"): ("be4c06d2b8903783818a5e4cba08c71b954a86f00021907706f66ac3e26c58bd", 249465),
    ("chemprot", "train"): ("ab17b85c4fb869b2338d7c9617414e63f3c7225e5005920b18d9cd996f1049d8", 1121208),
    ("chemprot", "dev"): ("bfe8f39e5146ad4bb16b23707dade850546a305047bc666f6f6824c6a7e3df2f", 678657),
    ("chemprot", "test"): ("372249c85ffea6d9a18dc5168cf45841b3d79b03412d6c620381cfc0dd3d6d49", 960369),
}
_SCIBERT_DIR = {"citation_intent": "citation_intent", "sciie": "sciie-relation-extraction",
                "chemprot": "chemprot"}


def _dapt_jsonl(name: str, title: str, labels: tuple[str, ...], metric: str, sizes: dict[str, int]
                ) -> DatasetEntry:
    files = tuple(
        _f(name, split, f"dapt/{name}/{split}.jsonl",
           _gh(*SCIBERT, f"data/text_classification/{_SCIBERT_DIR[name]}/{split}.txt"),
           *_SCIBERT_SHA[(name, split)])
        for split in ("train", "dev", "test"))
    return DatasetEntry(
        name, "dapt", "task", title, f"{DAPT_S3}/{name}/{{train,dev,test}}.jsonl", "dapt_jsonl", files,
        ("text",), labels, metric, sizes,
        "Pinned copy: SciBERT's data/text_classification (same split sizes and label sets as DAPT's jsonl, "
        "from which DAPT's files derive; not byte-compared with DAPT's S3 copy).")


def _glue(name: str, folder: str, title: str, text_fields: tuple[str, ...], labels: tuple[str, ...] | None,
          metric: str, files: tuple[FileEntry, ...], sizes: dict[str, int], notes: str = "",
          zip_name: str | None = None) -> DatasetEntry:
    where = f"{GLUE_ZIP}/{zip_name or folder}.zip" if name != "mrpc" else (
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_{train,test}.txt + GLUE dev_ids.tsv")
    source = f"{where} (GLUE; Hub nyu-mll/glue, config {name})"
    return DatasetEntry(name, "glue", "task", title, source, f"glue_{name}", files, text_fields, labels,
                        metric, sizes, notes)


def _glue_zip_files(name: str, folder: str, zip_name: str, splits: tuple[str, ...]) -> tuple[FileEntry, ...]:
    return tuple(_f(name, split, f"glue/{folder}/{split}.tsv", f"{GLUE_ZIP}/{zip_name}.zip",
                    member=f"{folder}/{split}.tsv") for split in splits)


_TASKS: list[DatasetEntry] = [
    _dapt_jsonl("citation_intent", "ACL-ARC citation intent (Jurgens et al. 2018)",
                ("Background", "CompareOrContrast", "Extends", "Future", "Motivation", "Uses"),
                "macro_f1", {"train": 1688, "dev": 114, "test": 139}),
    _dapt_jsonl("sciie", "SciERC relation classification (Luan et al. 2018)",
                ("COMPARE", "CONJUNCTION", "EVALUATE-FOR", "FEATURE-OF", "HYPONYM-OF", "PART-OF", "USED-FOR"),
                "macro_f1", {"train": 3219, "dev": 455, "test": 974}),
    _dapt_jsonl("chemprot", "ChemProt relation classification (Kringelum et al. 2016)",
                ("ACTIVATOR", "AGONIST", "AGONIST-ACTIVATOR", "AGONIST-INHIBITOR", "ANTAGONIST",
                 "DOWNREGULATOR", "INDIRECT-DOWNREGULATOR", "INDIRECT-UPREGULATOR", "INHIBITOR",
                 "PRODUCT-OF", "SUBSTRATE", "SUBSTRATE_PRODUCT-OF", "UPREGULATOR"),
                "micro_f1", {"train": 4169, "dev": 2427, "test": 3469}),
    DatasetEntry(
        "rct", "dapt", "task", "PubMed 200k RCT, 20k-abstract subset (Dernoncourt & Lee 2017)",
        f"{DAPT_S3}/rct-20k/{{train,dev,test}}.jsonl", "dapt_jsonl",
        tuple(_f("rct", s, f"dapt/rct-20k/{s}.jsonl", f"{DAPT_S3}/rct-20k/{s}.jsonl")
              for s in ("train", "dev", "test")),
        ("text",), ("BACKGROUND", "CONCLUSIONS", "METHODS", "OBJECTIVE", "RESULTS"), "micro_f1",
        {"train": 180040, "dev": 30212, "test": 30135}, "Not mirrored (files above 4 MiB); checksum unknown."),
    DatasetEntry(
        "hyperpartisan_news", "dapt", "task", "SemEval-2019 Task 4 HyperPartisan news, by-article",
        f"{DAPT_S3}/hyperpartisan_news/{{train,dev,test}}.jsonl (built from zenodo.org/record/1489920 + "
        "Longformer's hp-splits.json)", "semeval_hyperpartisan",
        (_f("hyperpartisan_news", "articles",
            "dapt/hyperpartisan_news/raw/articles-training-byarticle-20181122.xml",
            _gh("anshuly10/Biased-News-Detection", "8ce8a812945548aa8feea1a7383fe274ba566fd0",
                "articles-training-byarticle-20181122.xml"),
            "bbabd848f66ddd102651745930b50c41a11ade8d2a9273a6bd6b2db1e0642229", 2714335),
         _f("hyperpartisan_news", "ground_truth",
            "dapt/hyperpartisan_news/raw/ground-truth-training-byarticle-20181122.xml",
            _gh("anshuly10/Biased-News-Detection", "8ce8a812945548aa8feea1a7383fe274ba566fd0",
                "ground-truth-training-byarticle-20181122.xml"),
            "17cd01260c99739d4f3ac25f99ed39361cfde851bf018b675800a2b639bce790", 111875),
         _f("hyperpartisan_news", "splits", "dapt/hyperpartisan_news/raw/hp-splits.json",
            _gh("allenai/longformer", "f0d839e165277ffe8b0cfae10af4acdc5c07ed50", "scripts/hp-splits.json"),
            "46cbb91cba6d7f140fbfc2d67296d498f210d399ee50a46a092052817fd6fa8b", 3150)),
        ("text",), ("false", "true"), "macro_f1", {"train": 465, "dev": 57, "test": 65},
        "Overlapping splits resolved by the rule in this module's docstring (test > dev > train; "
        "unlisted dropped). Text: all text of the article element, cleaned as Longformer's hp_preprocess."),
    DatasetEntry(
        "ag", "dapt", "task", "AG News (Zhang et al. 2015)",
        f"{DAPT_S3}/ag/{{train,dev,test}}.jsonl (from the original ag_news_csv)", "ag_news_csv",
        (_f("ag", "classes", "dapt/ag/ag_news_csv/classes.txt",
            _gh("Shane-Neeley/CharCnn_Keras", "3e6cdbf2f97e3cbbfa349d1abf8a951e18694372",
                "data/ag_news_csv/classes.txt"),
            "612dbfa932f07a6ed837295a7d5746ce7412e7bb4bc32ba919fdb3cda3a1b9b5", 31),
         _f("ag", "test", "dapt/ag/ag_news_csv/test.csv",
            _gh("Shane-Neeley/CharCnn_Keras", "03836ce08fce38daac53e9b4255ef16e0b9f6303",
                "data/ag_news_csv/test.csv"),
            "521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699", 1857427),
         _f("ag", "train", "dapt/ag/ag_news_csv/train.csv", "https://s3.amazonaws.com/fast-ai-nlp/ag_news_csv.tgz",
            member="ag_news_csv/train.csv", optional=True)),
        ("text",), ("World", "Sports", "Business", "Sci/Tech"), "macro_f1",
        {"train": 115000, "dev": 5000, "test": 7600},
        "Label i is line i of classes.txt (CSV class 1-4); text = title + ' ' + description. "
        "Train CSV not mirrored: see the module docstring for the carve."),
    _glue("sst2", "SST-2", "Stanford Sentiment Treebank, binary", ("sentence",), ("0", "1"), "accuracy",
          (_f("sst2", "train", "glue/SST-2/train.tsv",
              _gh("nhatminh886688/transformers", "9ffc5fbcd5a43a1ec6eb5e89f2c36b6d774e540a",
                  "glue_data/SST-2/train.tsv"),
              "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1", 3806081),
           _f("sst2", "dev", "glue/SST-2/dev.tsv",
              _gh("nhatminh886688/transformers", "9ffc5fbcd5a43a1ec6eb5e89f2c36b6d774e540a",
                  "glue_data/SST-2/dev.tsv"),
              "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", 94931)),
          {"train": 67349, "dev": 872}),
    _glue("cola", "CoLA", "Corpus of Linguistic Acceptability", ("sentence",), ("0", "1"), "matthews",
          (_f("cola", "train", "glue/CoLA/train.tsv",
              _gh("michplunkett/computational-content-analysis", "2ca56c0d836bebefcb020921f2e745c0c4594101",
                  "data/cola_public/raw/in_domain_train.tsv"),
              "f320a10f92d3bce6b29152fde322a362eac39238e50d8de0c8815457fdf4fc12", 428578),
           _f("cola", "dev", "glue/CoLA/dev.tsv",
              _gh("amrnag/Specialized-Transformers", "cae3514a52b66977974bfedd7ecc2efd029a72e9",
                  "data/CoLA/dev.tsv"),
              "8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833fd", 53717)),
          {"train": 8551, "dev": 1043},
          "train.tsv is CoLA v1.1's in_domain_train.tsv (one line differs from GLUE's: line 6998)."),
    _glue("mrpc", "MRPC", "Microsoft Research Paraphrase Corpus", ("#1 String", "#2 String"), ("0", "1"),
          "accuracy_f1",
          (_f("mrpc", "train", "glue/MRPC/train.tsv",
              _gh("Nstats/my_bert", "733d79335044b1b7eabb5b47a0eae0cd621dadc0", "data/MRPC/train.tsv"),
              "122becc469405bc16f9defcb8715d2a4b7ce600e9d9381e6dc42bfdd1494c51d", 919457),
           _f("mrpc", "dev", "glue/MRPC/dev.tsv",
              _gh("Nstats/my_bert", "733d79335044b1b7eabb5b47a0eae0cd621dadc0", "data/MRPC/dev.tsv"),
              "81c8a1a9e1dfe461dd2c1a4f98f43fe18bece44d2bf9e3d0b245b88e5aa5eaf7", 103255)),
          {"train": 3668, "dev": 408},
          "GLUE builds MRPC from MSR's msr_paraphrase_{train,test}.txt plus dev_ids.tsv (no GLUE zip)."),
    _glue("stsb", "STS-B", "Semantic Textual Similarity Benchmark", ("sentence1", "sentence2"), None,
          "pearson_spearman",
          (_f("stsb", "train", "glue/STS-B/train.tsv",
              _gh("mieseung/Cutoff_with_Attribution", "0ef7460ee83f01034891e92b4f405d2c14944daf",
                  "glue_data/STS-B/train.tsv"),
              "41c4d978b6162abdcada7e49a982211954cca5459c228db478af333124b257a2", 984099),
           _f("stsb", "dev", "glue/STS-B/dev.tsv",
              _gh("mieseung/Cutoff_with_Attribution", "0ef7460ee83f01034891e92b4f405d2c14944daf",
                  "glue_data/STS-B/dev.tsv"),
              "fe7dc0632a5033562f3cadff991f6e8d9b9b6311861660e78c3c82eb7db67f59", 276928)),
          {"train": 5749, "dev": 1500}),
    _glue("rte", "RTE", "Recognizing Textual Entailment", ("sentence1", "sentence2"),
          ("entailment", "not_entailment"), "accuracy",
          (_f("rte", "train", "glue/RTE/train.tsv",
              _gh("marcwww/nlu_eval", "1403aef7eeb8e0876e28835daf0fa64918bea396", "data/RTE/train.tsv"),
              "81d25e323e1ab5b2ad7cd445f1a69db89f2b1c104f3e26915a9421aa4a5f4735", 846227),
           _f("rte", "dev", "glue/RTE/dev.tsv",
              _gh("marcwww/nlu_eval", "1403aef7eeb8e0876e28835daf0fa64918bea396", "data/RTE/dev.tsv"),
              "80230dfa1347282e7b532b06a1004a76a710087541189bf874223ddf0e3819fb", 90343)),
          {"train": 2490, "dev": 277}),
    _glue("mnli", "MNLI", "Multi-Genre NLI", ("sentence1", "sentence2"),
          ("entailment", "neutral", "contradiction"), "accuracy",
          _glue_zip_files("mnli", "MNLI", "MNLI", ("train", "dev_matched", "dev_mismatched")),
          {"train": 392702, "dev_matched": 9815, "dev_mismatched": 9832}, "Not mirrored; checksum unknown."),
    _glue("qqp", "QQP", "Quora Question Pairs", ("question1", "question2"), ("0", "1"), "accuracy_f1",
          _glue_zip_files("qqp", "QQP", "QQP-clean", ("train", "dev")),
          {"train": 363846, "dev": 40430}, "Not mirrored; checksum unknown.", zip_name="QQP-clean"),
    _glue("qnli", "QNLI", "Question NLI (SQuAD)", ("question", "sentence"),
          ("entailment", "not_entailment"), "accuracy",
          _glue_zip_files("qnli", "QNLI", "QNLIv2", ("train", "dev")),
          {"train": 104743, "dev": 5463}, "Not mirrored; checksum unknown.", zip_name="QNLIv2"),
    _glue("wnli", "WNLI", "Winograd NLI", ("sentence1", "sentence2"), ("0", "1"), "accuracy",
          _glue_zip_files("wnli", "WNLI", "WNLI", ("train", "dev")),
          {"train": 635, "dev": 71}, "Not mirrored; checksum unknown. Not in the paper's Table 1."),
]

_GROVER = "rowanz/grover"
_REUTERS = ("wuodar/reuters_text_classification", "ac1f2b10ba19cdddfeb525a172ba0e8de86fe16e")
_CSABS = ("allenai/sequential_sentence_classification", "c471fe3ad387056bc5330bb7db11c8c13bfd065d")
_WT2 = ("DiMarzioBian/Neural-Probabilistic-Language-Model-NIPS-2000", "343062b9daaa3b144dabde32fbcf5c87053c7978")

_CORPORA: list[DatasetEntry] = [
    DatasetEntry(
        "s2orc", "corpora", "corpus", "S2ORC v2020-07-05 metadata sample (titles + abstracts)",
        "S2ORC (Lo et al. 2020): DAPT's CS domain is 2.22M S2ORC papers, the paper samples 72k; the full "
        "corpus needs the S2ORC data-use agreement (github.com/allenai/s2orc)", "s2orc_metadata",
        (_f("s2orc", "metadata", "corpus/s2orc_sample/metadata_sample.jsonl",
            _gh("allenai/s2orc", "b67e963e6f4a8424ca7545198ac576039a8267b9",
                "data/v2020-07-05/metadata/sample.jsonl"),
            "83d3a385c7e2a2da27879f6b7a352cc904564d9e19bf049e8ff2bb13b9c2cc0b", 1393195),),
        notes="1000 papers of all fields, 488 with abstracts; option 'cs' keeps the 48 Computer Science ones."),
    DatasetEntry(
        "csabstruct", "corpora", "corpus", "CSAbstruct CS abstracts (Cohan et al. 2019)",
        "github.com/allenai/sequential_sentence_classification (Semantic Scholar CS abstracts)", "csabstruct",
        tuple(_f("csabstruct", s, f"corpus/cs_csabstruct/{s}.jsonl",
                 _gh(*_CSABS, f"data/CSAbstruct/{s}.jsonl"), sha, size)
              for s, sha, size in (
                  ("train", "0d184597fc87640e0a51d439ed3e3ccff68a28125da6151a3e86005b202829b1", 2023915),
                  ("dev", "37d8fc9a932516b290afacd4d294111141ce31c503260de8be145bd4b28d62f5", 357396),
                  ("test", "de6dfac6e8efed842b45764b1b1c551d72d14da849022544bba95a8a1dcc09cc", 242501))),
        notes="2189 abstracts; a document is the abstract's sentences joined."),
    DatasetEntry(
        "arxiv_cs", "corpora", "corpus", "arXiv CS paper titles + abstracts (1000)",
        "arXiv paper abstracts (cs.CV / cs.LG / stat.ML / cs.AI / cs.CL)", "arxiv_csv",
        (_f("arxiv_cs", "papers", "corpus/cs_arxiv/arxiv_data.csv",
            _gh("tiagoft/NLP", "897bafbd4a97393ae8797f59ec501d6c943ec1ac", "arxiv_data.csv"),
            "f7bb0aa044684daeffa18e99ff35a04d34161336ef3a870a4fd5e85609ef83d2", 1303085),)),
    DatasetEntry(
        "realnews", "corpora", "corpus", "RealNews samples from the Grover repository",
        "RealNews (Zellers et al. 2019): DAPT's News domain is 11.90M articles, the paper samples 623k; the "
        "full corpus is released on request (github.com/rowanz/grover)", "realnews_jsonl",
        (_f("realnews", "tiny", "corpus/news_realnews/realnews_tiny.jsonl",
            _gh(_GROVER, "7e901b8b3916ceb06a8373c41ddc4a8c9e7813e3", "realnews/realnews_tiny.jsonl"),
            "8092eb05856d1813b89c320ab2fbdb79e77e5351a9f62e5cd06dd0ced4ffcfd7", 17964),
         _f("realnews", "april2019_mini", "corpus/news_realnews/april2019_set_mini.jsonl",
            _gh(_GROVER, "38f7184bd87237ae2d3bc330b99f1e2e246f6d51", "sample/april2019_set_mini.jsonl"),
            "1a832a22a8f518ca646ebf580c5e0c9bd03d4c170916673b4e5e614b611ddbad", 35171)),
        notes="13 articles; a document is title + text."),
    DatasetEntry(
        "reuters21578", "corpora", "corpus", "Reuters-21578 newswire, reut2-001..003 (3000 records)",
        "Reuters-21578 Distribution 1.0 (UCI KDD archive)", "reuters_sgm",
        tuple(_f("reuters21578", f"reut2-00{i}", f"corpus/news_reuters21578/reut2-00{i}.sgm",
                 _gh(*_REUTERS, f"data/reut2-00{i}.sgm"), sha, size)
              for i, sha, size in (
                  (1, "1528e7e82d110d88d0234eb9619eadb7f9fd805711971df05975b92277dfdf4d", 1254440),
                  (2, "99f18068d0518952987dedd78c622e5c2a584e357d264d3754696c815f3e6628", 1217495),
                  (3, "78a3a8d7e04bc9d42c4614d5d5c60a4293dbe3f708df6fb5a71d9ef31f4b3fa3", 1298721)))
        + (_f("reuters21578", "readme", "corpus/news_reuters21578/README.txt",
              _gh(*_REUTERS, "data/README.txt"),
              "eb669045dd883c56cb5a96da1848c3380bc6371894c5663709a46776e3262a96", 36388),),
        notes="A document is TITLE + BODY of a record with a BODY; SGML entities and the latin-1 bytes decoded."),
    DatasetEntry(
        "wikitext2", "corpora", "corpus", "WikiText-2 v1 (tokenized), stand-in for Wikipedia + BookCorpus",
        "BERT's Wikipedia + BookCorpus (16 GB); WikiText (Merity et al. 2016) is the small local stand-in",
        "wikitext_tokens",
        (_f("wikitext2", "valid", "corpus/wikitext-2/wiki.valid.tokens", _gh(*_WT2, "data/wikitext-2/valid.txt"),
            "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8", 1121681),
         _f("wikitext2", "test", "corpus/wikitext-2/wiki.test.tokens", _gh(*_WT2, "data/wikitext-2/test.txt"),
            "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0", 1256449),
         _f("wikitext2", "train", "corpus/wikitext-2/wiki.train.tokens",
            "https://wikitext.smerity.com/wikitext-2-v1.zip", member="wikitext-2/wiki.train.tokens",
            optional=True)),
        notes="Documents are split on top-level ' = Title = ' headings. The train split is not mirrored."),
]

_BERT_DU = ("du511/Sonic-RNY80C", "95e7682da5924fc864a9532e879165702661b920")
_ROBERTA = ("NadiaSbaa/Mood-Miner", "4c1b92c105a36e4ebb85e6d85b8e6de7ece469d7")

_TOKENIZERS: list[DatasetEntry] = [
    DatasetEntry(
        "bert-base-uncased", "tokenizers", "tokenizer", "BERT-base uncased WordPiece (30,522) + model config",
        f"{HUB}/google-bert/bert-base-uncased", "hf_tokenizer",
        (_f("bert-base-uncased", "vocab", "tokenizers/bert-base-uncased/vocab.txt",
            _gh("Nstats/my_bert", "4831e0fa230f97ca3081141f8d2af2454ba55a4c",
                "data/pretrained_model/uncased_base/vocab.txt"),
            "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3", 231508),
         _f("bert-base-uncased", "tokenizer_json", "tokenizers/bert-base-uncased/tokenizer.json",
            _gh(*_BERT_DU, "bert-base-uncased/tokenizer.json"),
            "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66", 711396),
         _f("bert-base-uncased", "tokenizer_config", "tokenizers/bert-base-uncased/tokenizer_config.json",
            _gh(*_BERT_DU, "bert-base-uncased/tokenizer_config.json"),
            "1f92c93d2e31974acffab86d48e80a9357acb18c68346c5472ef1d12c72d5d77", 1221),
         _f("bert-base-uncased", "special_tokens_map", "tokenizers/bert-base-uncased/special_tokens_map.json",
            _gh(*_BERT_DU, "bert-base-uncased/special_tokens_map.json"),
            "b6d346be366a7d1d48332dbc9fdf3bf8960b5d879522b7799ddba59e76237ee3", 125),
         _f("bert-base-uncased", "config", "tokenizers/bert-base-uncased/config.json",
            _gh(*_BERT_DU, "bert-base-uncased/config.json"),
            "b8e46073b61168c2bad87aa72876602847c46359540d1a00e52e70cf4de74817", 658),
         _f("bert-base-uncased", "bert_config", "tokenizers/bert-base-uncased/bert_config.json",
            _gh("Nstats/my_bert", "0413ed4be445e8502eb70c2b2e7063406421c10d",
                "data/pretrained_model/uncased_base/bert_config.json"),
            "7b4e5f53efbd058c67cda0aacfafb340113ea1b5797d9ce6ee411704ba21fcbc", 313)),
        notes="config.json/tokenizer*.json are re-saved by recent transformers (same hyperparameters as the Hub)."),
    DatasetEntry(
        "roberta-base", "tokenizers", "tokenizer", "RoBERTa-base byte-level BPE (50,265) + model config",
        f"{HUB}/FacebookAI/roberta-base", "hf_tokenizer",
        (_f("roberta-base", "vocab", "tokenizers/roberta-base/vocab.json",
            _gh(*_ROBERTA, "config/vocab-roberta-base.json"),
            "9e7f63c2d15d666b52e21d250d2e513b87c9b713cfa6987a82ed89e5e6e50655", 898823),
         _f("roberta-base", "merges", "tokenizers/roberta-base/merges.txt",
            _gh(*_ROBERTA, "config/merges-roberta-base.txt"),
            "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5", 456318),
         _f("roberta-base", "config", "tokenizers/roberta-base/config.json",
            _gh(*_ROBERTA, "config/config-roberta-base.json"),
            "1cdd08cc1a9b245614b5c1dfbc9925eb16f07fadde211710ff1394515599dd07", 1029)),
        notes="vocab.json / merges.txt are byte-identical to the Hub's; config.json is a transformers-2.x "
              "serialization (same architecture)."),
]
