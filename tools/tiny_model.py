"""Build a tiny random-weight Llama model that vLLM can serve, with nothing downloaded.

The tokenizer is a byte-level BPE trained by `tokenizers` on local text (this repository's
own docs by default), wrapped as a `PreTrainedTokenizerFast` with a minimal chat template so
the chat endpoint works; the model is a `LlamaForCausalLM` built from a config with random
weights. Both are written with `save_pretrained`, so `vllm serve <dir>` loads them like any
Hugging Face checkpoint. What it says is noise; how fast it says it is what a recording needs.

Run it with the Python of an environment holding `transformers`, `tokenizers` and `torch`
(the vLLM one: tools/record_vllm.py calls it there).

Examples:
    /work/vllm-env/bin/python tools/tiny_model.py /work/vllm-model
    /work/vllm-env/bin/python tools/tiny_model.py /tmp/m --vocab 4000 --layers 4 --hidden 256 --heads 4
"""

from __future__ import annotations

import argparse
import pathlib

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]


def local_text(roots: list[pathlib.Path]) -> list[str]:
    files = sorted(p for r in roots for p in (r.rglob("*.md") if r.is_dir() else [r]))
    lines = [ln for p in files for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
    if not lines:
        raise SystemExit(f"error: no text under {', '.join(map(str, roots))}; pass --text DIR")
    return lines


def build(out: pathlib.Path, text_roots: list[pathlib.Path], vocab: int, layers: int, hidden: int,
          heads: int, max_len: int, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(local_text(text_roots), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", model_max_length=max_len)
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max_len, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, tie_word_embeddings=True, torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    print(f"wrote {out}: vocab {len(fast)}, {layers} layers, hidden {hidden}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__[__doc__.index("Examples:"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path, help="directory to write the model into")
    repo = pathlib.Path(__file__).resolve().parents[1]
    ap.add_argument("--text", type=pathlib.Path, action="append",
                    help="file or directory of .md files to train the tokenizer on "
                         "(default: this repository's README and docs)")
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2,
                    help="attention heads (head size = hidden / heads; vLLM's CPU attention needs 32, 64, 128...)")
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    build(a.out, a.text or [repo / "README.md", repo / "docs"], a.vocab, a.layers, a.hidden,
          a.heads, a.max_len, a.seed)


if __name__ == "__main__":
    main()
