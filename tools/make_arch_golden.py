#!/usr/bin/env python3
"""make_arch_golden.py: tiny random-weight models of every architecture, with reference logits.

What: for each variant below, builds a small model with HF transformers' own class (random
      weights, rounded to bf16 so that the bf16 file holds them exactly), runs it in fp32 on the
      CPU over a few random token sequences, and writes to tests/data/arch/<variant>/:
        config.json        the config as transformers saves it (transformers' own key names)
        model.safetensors  the weights in bf16 (a few hundred KB at most)
        golden.json        token ids and the logits at a set of positions of each sequence
      tests/model/test_arch_golden.cpp loads these with longctx and matches the logits.
Why:  every architecture and RoPE-scaling variant checked against the reference implementation
      without downloading any weights, and without torch in CI (the data is committed).
Run:  tools/setup_reference_venv.sh, then
      ~/.cache/longctx/venv/bin/python tools/make_arch_golden.py [--out tests/data/arch] [--only NAME]
"""
import argparse
import json
import math
import os

import torch
import transformers
from safetensors.torch import save_file

VOCAB = 128  # small vocabulary keeps the embedding (and the file) tiny
SEQ_LONG = 80  # longer than the tiny sliding window and the tiny "original" contexts below
SEQ_SHORT = 24  # shorter than the tiny original context (LongRoPE short factors)
LOGIT_EVERY = 8  # logits stored at every 8th position and the last one


def variants():
    """name -> (model class, config, sequence lengths). Each is a miniature of a real model."""
    from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                              Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)
    common = dict(vocab_size=VOCAB, max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    out = {}
    out["llama"] = (LlamaForCausalLM, LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=10000.0, **common), [SEQ_LONG])
    out["qwen2"] = (Qwen2ForCausalLM, Qwen2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=1e6, **common), [SEQ_LONG])
    # Qwen3: QK-norm, no QKV bias, head_dim independent of hidden / heads.
    out["qwen3"] = (Qwen3ForCausalLM, Qwen3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, rope_theta=1e6, **common), [SEQ_LONG])
    # YaRN as Qwen3 / Qwen2.5-1M configure it: factor 4 over an original context of 32, so the
    # ramp between interpolated and extrapolated frequencies falls inside the 16 frequencies.
    out["qwen3_yarn"] = (Qwen3ForCausalLM, Qwen3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, rope_theta=10000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, **common),
        [SEQ_LONG])
    # Gemma 3: sliding-window layers (window 16 < 80 tokens) interleaved with global layers,
    # separate local RoPE base, linear scaling on global layers only (as the 4B+ models),
    # query_pre_attn_scalar != head_dim, head_dim 32 with 2 heads of a 48-wide model.
    g = dict(common)
    g["tie_word_embeddings"] = True
    out["gemma3"] = (Gemma3ForCausalLM, Gemma3TextConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=24, sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_theta=10000.0, rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 2.0},
        hidden_activation="gelu_pytorch_tanh", **g), [SEQ_SHORT, SEQ_LONG])
    # Phi-3 LongRoPE: short factors up to the original context (32), long factors past it.
    half = 8  # head_dim 16 / 2
    gen = torch.Generator().manual_seed(7)
    short = [round(1.0 + 0.5 * float(x), 4) for x in torch.rand(half, generator=gen)]
    long = [round(1.0 + 6.0 * float(x), 4) for x in torch.rand(half, generator=gen)]
    out["phi3_longrope"] = (Phi3ForCausalLM, Phi3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=10000.0, original_max_position_embeddings=32, sliding_window=None,
        rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long}, **common),
        [SEQ_SHORT, SEQ_LONG])
    return out


def randomize(model, seed):
    """Weights with O(1) activations (default inits give near-constant logits), bf16-exact."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = 1.0 if "embed" in name else 1.0 / math.sqrt(p.shape[-1])
                v = torch.randn(p.shape, generator=gen) * std
            elif "norm" in name:
                v = 0.2 * torch.randn(p.shape, generator=gen)
                if "gemma" not in type(model).__name__.lower():
                    v += 1.0  # plain RMSNorm multiplies by w; Gemma's by (1 + w)
            else:  # biases
                v = 0.1 * torch.randn(p.shape, generator=gen)
            p.copy_(v.to(torch.bfloat16).float())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/arch")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    for i, (name, (cls, cfg, lengths)) in enumerate(variants().items()):
        if args.only and name != args.only:
            continue
        torch.manual_seed(100 + i)
        model = cls(cfg).float().eval()
        randomize(model, 200 + i)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.config.save_pretrained(d)
        sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        gen = torch.Generator().manual_seed(300 + i)
        seqs = []
        for n in lengths:
            ids = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float()
            positions = sorted(set(list(range(0, n, LOGIT_EVERY)) + [n - 1]))
            seqs.append({"ids": ids, "positions": positions,
                         "logits": [[round(v, 6) for v in logits[p].tolist()] for p in positions]})
        golden = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU",
                  "model_class": cls.__name__, "sequences": seqs}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{name}: {cls.__name__}, {size // 1024} KB, logits max |.| "
              f"{max(abs(v) for s in seqs for r in s['logits'] for v in r):.2f}")


if __name__ == "__main__":
    main()
