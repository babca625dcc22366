"""A tiny, randomly initialised `Ernie4_5ForCausalLM` plus an offline tokenizer, built locally.

The real weights cannot be downloaded here; this model has the real architecture (so vLLM loads
it through the same code path) but ~1.6 MB of weights. Run as a script to build one:
`python -m tests.harness.tiny_model DIR`. Files are world-readable so a service user can load them.
Its embeddings are tied to the output layer, so greedy decoding only repeats the prompt's last token (the chat
template's trailing space). `cached_answering(seed)` unties them (float32, weights from `seed`): its greedy answers
are words that follow from the prompt, so a golden set can be recorded from one seed, and another seed (same
architecture, tokenizer and served name) is a "broken" version that answers otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

SERVED_NAME = "ernie-tiny"
VOCAB_SIZE = 512
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|sys|>{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant: {{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)
CORPUS = [
    "ERNIE is a small language model served by vLLM behind nginx.",
    "The quick brown fox jumps over the lazy dog.",
    "Customer support: please describe your problem and your order number.",
    "文心大模型为客服、内容审核和知识问答提供服务。",
    "Zero downtime cutover: start, gate on health, switch, verify, drain, stop.",
    "def hello(name):\n    return f'hello {name}'\n",
    "1 2 3 4 5 6 7 8 9 10 -- , . ; : ! ? ( ) [ ] { } # * _ ` ~",
]


def fingerprint() -> str:
    """Changes when this generator changes, so a cached model is rebuilt exactly then."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def build(out: Path, seed: int = 0, tied: bool = True, dtype: str = "bfloat16") -> Path:
    """Write config, safetensors weights (drawn with `seed`) and tokenizer into `out` (created) and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Ernie4_5Config, Ernie4_5ForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    special = ["<unk>", "<s>", "</s>", "<pad>", "<|sys|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    cfg = Ernie4_5Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention accepts only some head sizes; 32 is one
        max_position_embeddings=4096,
        tie_word_embeddings=tied,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype=dtype,
    )
    model = Ernie4_5ForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    (out / "ernie-tiny.json").write_text(json.dumps({"fingerprint": fingerprint(), "served_name": SERVED_NAME}))
    for path in [out, *out.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return out


def cached_build(cache_root: Path, prefix: str, marker: str, fingerprint: str, build) -> Path:
    """`cache_root/<prefix>-<fingerprint>`, built once by `build(dir)` (done when `marker` exists) and reused."""
    target = cache_root / f"{prefix}-{fingerprint}"
    if (target / marker).exists():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    build(tmp)
    os.replace(tmp, target)  # a half-built model is never visible under the final name
    return target


def word_token_ids(model_dir: Path) -> list[int]:
    """Ids of the tokens that are ASCII words (optionally after a space), for `allowed_token_ids`: the random model's
    free output is mostly byte tokens of unfinished UTF-8 and special tokens, which vLLM streams as nothing, so its
    visible pieces come in bursts (5 pieces took 5 tokens or all 1500). Held to words, each token is one piece."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    return sorted(i for t, i in vocab.items() if re.fullmatch(r"\u0120?[A-Za-z]{2,}", t))  # \u0120: ByteLevel's space


def cached(cache_root: Path) -> Path:
    """The model for this generator version, built once into `cache_root` and reused."""
    return cached_build(cache_root, "ernie-tiny", "ernie-tiny.json", fingerprint(), build)


def cached_answering(cache_root: Path, seed: int = 0) -> Path:
    """The model with untied output weights drawn from `seed`, in float32 (greedy answers stable to the last token),
    built once into `cache_root` and reused."""
    return cached_build(cache_root, f"ernie-tiny-answering{seed}", "ernie-tiny.json", fingerprint(),
                        lambda out: build(out, seed, tied=False, dtype="float32"))  # fmt: skip


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
