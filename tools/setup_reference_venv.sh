#!/usr/bin/env bash
# setup_reference_venv.sh: the Python environment the golden-data tools run in (not CI).
#
# What: a virtualenv with CPU-only torch, HF transformers, safetensors, gguf and sentencepiece,
#       in $LONGCTX_VENV (default ~/.cache/longctx/venv). tools/make_arch_golden.py and
#       tools/make_golden.py run inside it; the tests only read the data those tools wrote.
# Why:  the reference implementation is transformers itself; CI must not need torch.
# Run:  tools/setup_reference_venv.sh && ~/.cache/longctx/venv/bin/python tools/make_arch_golden.py
set -euo pipefail
venv=${LONGCTX_VENV:-$HOME/.cache/longctx/venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
# torch from PyPI (the only registry reached): its Linux wheel brings the CUDA runtime
# packages too (~3 GB); the tools run it on the CPU.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  torch "transformers>=4.50" safetensors gguf sentencepiece protobuf numpy accelerate
"$venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
