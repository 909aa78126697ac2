#!/usr/bin/env python3
"""make_arch_golden.py: tiny random-weight models of every architecture, with reference logits.

What: for each variant below, builds a small model with HF transformers' own class (random
      weights, rounded to bf16 so that the bf16 file holds them exactly), runs it in fp32 on the
      CPU over a few random token sequences, and writes to tests/data/arch/<variant>/:
        config.json        the config as transformers saves it (transformers' own key names)
        model.safetensors  the weights in bf16 (a few hundred KB at most)
        model.gguf         (gemma3, qwen3_yarn, phi3_longrope) the same weights as llama.cpp's
                           converter writes them
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
                              MistralConfig, MistralForCausalLM,
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
    # (Added last: each variant's seeds follow its position.) Mistral-Nemo: head_dim set apart from hidden / heads (128 with hidden 5120 and 32 heads).
    out["mistral_nemo"] = (MistralForCausalLM, MistralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, rope_theta=1e6, sliding_window=None, **common), [SEQ_LONG])
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


# HF module path inside a layer -> gguf-py tensor (Gemma 3 and Phi-3 differ from the Llama family).
def layer_tensors(arch):
    import gguf
    T = gguf.MODEL_TENSOR
    m = {
        "self_attn.q_proj": T.ATTN_Q, "self_attn.k_proj": T.ATTN_K, "self_attn.v_proj": T.ATTN_V,
        "self_attn.o_proj": T.ATTN_OUT, "self_attn.q_norm": T.ATTN_Q_NORM, "self_attn.k_norm": T.ATTN_K_NORM,
        "input_layernorm": T.ATTN_NORM, "post_attention_layernorm": T.FFN_NORM,
        "mlp.gate_proj": T.FFN_GATE, "mlp.up_proj": T.FFN_UP, "mlp.down_proj": T.FFN_DOWN,
        # Phi-3's fused projections, as llama.cpp keeps them.
        "self_attn.qkv_proj": T.ATTN_QKV, "mlp.gate_up_proj": T.FFN_UP,
    }
    if arch == "gemma3":
        m.update({"post_attention_layernorm": T.ATTN_POST_NORM, "pre_feedforward_layernorm": T.FFN_NORM,
                  "post_feedforward_layernorm": T.FFN_POST_NORM})
    return m


def write_gguf(arch, model, path):
    """A tiny model as llama.cpp's converter writes `arch` (gguf-py's key and tensor names): F32
    norms (Gemma: with the 1 of (1 + w) folded in), F16 matrices (exact for these bf16 values).
    Gemma 3 keys that llama.cpp hard-codes (pattern 6, local base 10000, scale by head_dim) are
    written explicitly, as the tiny model differs from them. Phi-3's LongRoPE factors are the
    rope_factors_short/long tensors, its attention factor a key, as llama.cpp stores them."""
    import gguf
    import numpy as np
    c = model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny {arch}")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    rp = c.rope_parameters
    if arch == "gemma3":
        w.add_rope_freq_base(rp["full_attention"]["rope_theta"])
        w.add_rope_freq_base_swa(rp["sliding_attention"]["rope_theta"])
        full = rp["full_attention"]
        if full.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(full["factor"])
        w.add_sliding_window(c.sliding_window)
        w.add_sliding_window_pattern([t == "sliding_attention" for t in c.layer_types])
        w.add_attention_scale(c.query_pre_attn_scalar ** -0.5)
    else:
        w.add_rope_freq_base(rp["rope_theta"])
        w.add_rope_dimension_count(head_dim)
        if rp.get("rope_type") == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(rp["factor"])
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        if rp.get("rope_type") == "longrope":
            orig = rp["original_max_position_embeddings"]
            scale = c.max_position_embeddings / orig
            w.add_rope_scaling_orig_ctx_len(orig)
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)))
            w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight",
                         np.array(rp["long_factor"], dtype=np.float32))
            w.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight",
                         np.array(rp["short_factor"], dtype=np.float32))
    names, T, per_layer = gguf.TENSOR_NAMES, gguf.MODEL_TENSOR, layer_tensors(arch)
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight":
            if c.tie_word_embeddings:
                continue
            name = names[T.OUTPUT]
        elif hf_name == "model.embed_tokens.weight":
            name = names[T.TOKEN_EMBD]
        elif hf_name == "model.norm.weight":
            name = names[T.OUTPUT_NORM]
        else:
            parts = hf_name.split(".")  # model.layers.<i>.<module...>.weight
            name = names[per_layer[".".join(parts[3:-1])]].format(bid=int(parts[2]))
        name += ".weight"
        a = t.detach().float().numpy()
        if hf_name.endswith("norm.weight"):
            w.add_tensor(name, (a + (1.0 if arch == "gemma3" else 0.0)).astype(np.float32))
        else:
            w.add_tensor(name, a.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Variants also written as GGUF: variant -> GGUF architecture.
GGUF_ARCHS = {"gemma3": "gemma3", "qwen3_yarn": "qwen3", "phi3_longrope": "phi3"}


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
        if name in GGUF_ARCHS:
            write_gguf(GGUF_ARCHS[name], model, os.path.join(d, "model.gguf"))
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
