"""llamacpp_quantize.py: a copy of a GGUF re-quantized by llama.cpp's own quantizer (as
`llama-quantize IN OUT TYPE` would; tensors llama.cpp keeps at higher precision stay so).
Run (scripts/bench-llamacpp.sh does): python bench/llamacpp_quantize.py IN.gguf OUT.gguf Q4_0
"""
import sys

import llama_cpp

FTYPES = {"Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "Q4_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1,
          "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}


def main():
    src, dst, kind = sys.argv[1:4]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.allow_requantize = True  # the source is itself quantized (the default model is Q4_1)
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize failed ({rc})")


if __name__ == "__main__":
    main()
