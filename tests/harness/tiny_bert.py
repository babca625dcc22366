"""A tiny, randomly initialised BERT embedding model (`BertModel`, the architecture of bge-small-zh) plus an
offline WordPiece tokenizer, built locally for the dense retrieval path's tests.

vLLM 0.32 maps the `BertModel` architecture to its pooling model `BertEmbeddingModel` (encoder-only attention,
which the CPU backend supports for head sizes 32, 64, ...), so `--runner pooling` serves it on
`/v1/embeddings`. Like bge-small-zh, the directory carries sentence-transformers files (modules.json,
1_Pooling, 2_Normalize): vLLM reads them for CLS pooling and L2 normalisation.

The vocabulary covers every ASCII letter and digit (alone and as a `##` continuation, so any English word
tokenises without [UNK]), the words of `TEXT`, every CJK character of `TEXT` and the `COMMON_CJK` most frequent
characters of jieba's dictionary (BERT's tokenizer splits CJK text into single characters): Chinese text
tokenises to real ids (the test corpus's 905 distinct characters all but 7). Its vectors are noise: tests
check plumbing, never quality; `reference()` gives the vectors transformers computes for a few texts, for a
server's answers to be compared with. Run as a script to build one: `python -m tests.harness.tiny_bert DIR`.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import string
import sys
from pathlib import Path

from tests.harness.tiny_model import cached_build

SERVED_NAME = "bert-tiny"
HIDDEN_SIZE = 64  # 2 heads of 32: a head size vLLM's CPU attention accepts
MAX_POSITIONS = 512
COMMON_CJK = 3500  # the corpus under tests/data/docs_corpus: 7 characters missing at 3500, 54 at 2000 (measured)
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WIDE_PUNCT = "，。、；：？！“”‘’（）《》【】「」『』〈〉—…·～×÷°％"
TEXT = """\
部署 > 升级：升级前先备份配置文件，再停止旧实例，启动新实例并检查健康状态，确认无误后切换流量。
年假规定：员工入职满一年后每年享有五天带薪年假，满十年后享有十天，未休完的年假可以顺延到下一年三月底。
VPN 配置：在公司电脑上安装客户端，输入服务器地址和账号密码，连接成功后即可访问内部网络与知识库。
报销流程：出差回来后一周内提交发票和行程单，由部门经理审批，财务部门每月十五日统一付款。
密码策略：密码长度不少于十二位，必须包含大小写字母、数字和符号，每九十天更换一次，不得重复使用。
服务器机房位于北京，温度保持在二十度左右，进入机房需要登记并由管理员陪同。
模型推理服务使用文心大模型，通过网关对外提供接口，支持流式输出、引用溯源和文档问答。
客户支持：请描述您的问题并提供订单号，我们会在两个工作日内回复您。
The annual leave policy gives every employee five paid days a year after the first year of service.
To configure the VPN, install the client, enter the server address, your account and password, then connect.
Upgrade steps: back up the configuration, stop the old instance, start the new one, check its health, switch traffic.
Expense reports need receipts and the travel itinerary within one week; the finance team pays on the fifteenth.
The quick brown fox jumps over the lazy dog. Document search with citations, embeddings and vector index.
"""

REFERENCE_TEXTS = [TEXT.splitlines()[i] for i in (0, 1, 2, 8, 11)]  # Chinese, mixed (VPN 配置), English


def fingerprint() -> str:
    """Changes when this generator changes, so a cached model is rebuilt exactly then."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _is_cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def common_cjk(n: int = COMMON_CJK) -> list[str]:
    """The n CJK characters most frequent in jieba's dictionary (characters weighted by their words' counts)."""
    import jieba

    counts: collections.Counter[str] = collections.Counter()
    with open(Path(jieba.__file__).with_name("dict.txt"), encoding="utf-8") as f:
        for line in f:
            word, freq, *_ = line.split()
            for ch in word:
                if _is_cjk(ch):
                    counts[ch] += int(freq)
    return [ch for ch, _ in counts.most_common(n)]


def vocabulary(text: str = TEXT, common: list[str] | None = None) -> list[str]:
    """WordPiece vocabulary: specials, ASCII characters and continuations, the words and CJK characters of
    `text`, then the `common` CJK characters."""
    ascii_chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = SPECIAL + ascii_chars + [f"##{c}" for c in string.ascii_lowercase + string.digits]
    words = sorted({w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1})
    cjk = sorted({ch for ch in text if _is_cjk(ch)}) + list(common or [])
    punct = sorted({ch for ch in text + WIDE_PUNCT if not ch.isascii() and not _is_cjk(ch) and not ch.isspace()})
    seen: set[str] = set()
    return [p for p in pieces + words + cjk + punct if not (p in seen or seen.add(p))]


def _sentence_transformers_files(out: Path) -> None:
    """What bge-small-zh ships for sentence-transformers; vLLM takes pooling (CLS) and normalisation from it."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": HIDDEN_SIZE, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))
    (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_POSITIONS, "do_lower_case": True}))


def build(out: Path) -> Path:
    """Write config, safetensors weights, tokenizer and sentence-transformers files into `out` (created)."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    out.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(TEXT, common_cjk())
    ids = {piece: i for i, piece in enumerate(vocab)}
    tok = BertTokenizer(vocab=ids, do_lower_case=True, tokenize_chinese_chars=True, model_max_length=MAX_POSITIONS)
    tok.save_pretrained(out)

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=HIDDEN_SIZE,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=2,
        pad_token_id=vocab.index("[PAD]"),
        initializer_range=0.5,  # at BERT's 0.02 the CLS vectors of any two texts have cosine 1.000 (measured)
        torch_dtype="float32",
    )
    model = BertModel(cfg, add_pooling_layer=True).eval()
    model.save_pretrained(out, safe_serialization=True)
    _sentence_transformers_files(out)
    with torch.no_grad():  # what a server must return for these texts: the CLS vector, L2-normalised
        cls = model(**tok(REFERENCE_TEXTS, padding=True, return_tensors="pt")).last_hidden_state[:, 0]
    reference = {"texts": REFERENCE_TEXTS, "vectors": torch.nn.functional.normalize(cls, dim=-1).tolist()}
    meta = {"fingerprint": fingerprint(), "served_name": SERVED_NAME, "dimension": HIDDEN_SIZE, "reference": reference}
    (out / "bert-tiny.json").write_text(json.dumps(meta, ensure_ascii=False))
    for path in [out, *out.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return out


def reference(model_dir: Path) -> dict:
    """{"texts": [...], "vectors": [...]}: the model's own normalised CLS vectors, computed by transformers at build."""
    return json.loads((model_dir / "bert-tiny.json").read_text())["reference"]


def cached(cache_root: Path) -> Path:
    """The model for this generator version, built once into `cache_root` and reused."""
    return cached_build(cache_root, "bert-tiny", "bert-tiny.json", fingerprint(), build)


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
