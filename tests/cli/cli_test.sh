#!/usr/bin/env bash
# cli_test.sh: the `longctx` binary end to end on a tiny model: the happy path works and every
# kind of bad input gets one clear `longctx: <what is wrong>` line on stderr and a non-zero exit
# (2: the command line is wrong, found before anything loads; 1: the work failed), never a crash.
# Usage errors are given with a model that does not exist (NOPE): had the model been opened, the
# message would name it instead, so those cases also check that the error comes before any work.
# Run: tests/cli/cli_test.sh build/src/cli/longctx   (CTest runs it as cli_test)
set -u
BIN=${1:?usage: cli_test.sh PATH/TO/longctx}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0

# expect_rc RC NAME NEEDLE CMD...: CMD must exit RC and print "longctx: ...NEEDLE..." on stderr.
expect_rc() {
  local want=$1 name=$2 needle=$3; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [[ $rc -eq $want ]] && grep -q "^longctx: " "$TMP/err" && grep -qF -- "$needle" "$TMP/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL $name: rc=$rc (wanted $want), wanted 'longctx: ...$needle' in stderr:"; cat "$TMP/err"
  fi
}
expect_usage() { expect_rc 2 "$@"; }  # a bad command line
expect_fail() { expect_rc 1 "$@"; }   # bad input found while working
# expect_ok NAME CMD...: CMD must exit 0.
expect_ok() {
  local name=$1; shift
  if "$@" >"$TMP/out" 2>"$TMP/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name:"; cat "$TMP/err"; fi
}
# expect_in NAME NEEDLE FILE: FILE (out or err of the last command) contains NEEDLE.
expect_in() {
  if grep -qF -- "$2" "$TMP/$3"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $1: '$2' not in $3:"; cat "$TMP/$3"; fi
}

expect_ok tiny "$BIN" tiny-model --out "$TMP/m"
M="$TMP/m/tiny.gguf"       # trained context 512
NOPE="$TMP/nope.gguf"
expect_ok generate "$BIN" generate -m "$M" -p "the theater" -n 5 -q
expect_ok generate_json "$BIN" generate -m "$M" -p "the theater" -n 5 --json
python3 -c "import json,sys; d=json.load(open('$TMP/out')); assert len(d['tokens'])==5 and d['timings']['prefill_s']>0" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL json output"; cat "$TMP/out"; }
expect_ok generate_fp32_weights "$BIN" generate -m "$M" -p "the theater" -n 3 -q --cpu-weights fp32
expect_ok generate_hf "$BIN" generate -m "$TMP/m/hf" --chat "hi" -n 3 --temp 0.8 --top-k 5 --top-p 0.9 --seed 1 -q
expect_ok inspect "$BIN" inspect "$M"
expect_in inspect_output "tiny llama" out
# The answer ends with a newline before the stats line, also when both go to one file.
"$BIN" generate -m "$M" -p "the theater" -n 3 >"$TMP/both" 2>&1
[[ $(grep -c '^\[prompt ' "$TMP/both") -eq 1 ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL stats line:"; cat "$TMP/both"; }
# Threads above the core count: capped, with a warning, and the run still works.
expect_ok too_many_threads "$BIN" generate -m "$M" -p "the theater" -n 2 -q -t 1000
expect_in too_many_threads_warning "cores of this machine" err
# -c past the trained context needs --extrapolate.
expect_ok extrapolate "$BIN" generate -m "$M" -p "the theater" -n 2 -q -c 1024 --extrapolate
# Every help shows the defaults.
expect_ok help "$BIN" generate --help
expect_in help_default_threads "-t,--threads INT=0" out
expect_in help_default_chunk "--prefill-chunk INT=512" out
expect_ok bench_cpu "$BIN" bench model -m "$M" --lengths 16 --decode 2 --json "$TMP/b.json"
expect_in bench_cpu_no_mfu "decode tok/s" err
grep -qE "MFU|GPU mem" "$TMP/err" && { fail=$((fail + 1)); echo "FAIL bench on the CPU prints GPU columns:"; cat "$TMP/err"; } || pass=$((pass + 1))
python3 -c "import json; d=json.load(open('$TMP/b.json')); assert 'kv_cache_type' not in d and d['device']=='cpu'" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL bench json on the CPU"; cat "$TMP/b.json"; }

# The command line is wrong: exit 2 before anything loads.
expect_usage no_command "needs a command: generate" "$BIN"
expect_usage misspelt_command "unknown command 'generat' for 'longctx' (did you mean 'generate'?)" "$BIN" generat -p hi
expect_usage misspelt_bench "did you mean 'model'?" "$BIN" bench modle
expect_usage bench_no_command "'longctx bench' needs a command: model" "$BIN" bench
expect_usage no_prompt "needs a prompt" "$BIN" generate -m "$NOPE"
expect_usage unknown_flag "unknown option '--frobnicate' for 'longctx generate'" "$BIN" generate -m "$NOPE" -p hi --frobnicate
expect_usage misspelt_flag "did you mean '--top-k'?" "$BIN" generate -m "$NOPE" -p hi --topk 3
expect_usage old_flag_name "did you mean '--gpu-chunk' or '--prefill-chunk'?" "$BIN" generate -m "$NOPE" -p hi --chunk 64
expect_usage negative_n "--max-new-tokens: must not be negative (got -5)" "$BIN" generate -m "$NOPE" -p hi -n -5
expect_usage negative_temp "--temp: must not be negative (got -1)" "$BIN" generate -m "$NOPE" -p hi --temp -1
expect_usage nan_temp "--temp: 'nan' is not a finite number" "$BIN" generate -m "$NOPE" -p hi --temp nan
expect_usage negative_top_k "--top-k: must not be negative (got -3)" "$BIN" generate -m "$NOPE" -p hi --top-k -3
expect_usage zero_top_p "--top-p: must be in (0, 1]" "$BIN" generate -m "$NOPE" -p hi --top-p 0
expect_usage big_top_p "--top-p: must be in (0, 1]" "$BIN" generate -m "$NOPE" -p hi --top-p 2
expect_usage zero_chunk "--prefill-chunk: must be at least 1 (got 0)" "$BIN" generate -m "$NOPE" -p hi --prefill-chunk 0
expect_usage negative_seed "--seed: must not be negative (got -1)" "$BIN" generate -m "$NOPE" -p hi --seed -1
expect_usage bad_n "--max-new-tokens: 'lots' is not a whole number" "$BIN" generate -m "$NOPE" -p hi -n lots
expect_usage huge_n "--max-new-tokens: '99999999999' is out of range" "$BIN" generate -m "$NOPE" -p hi -n 99999999999
expect_usage no_value "--device needs a value" "$BIN" generate -m "$NOPE" -p hi --device
expect_usage stray_argument "unexpected argument 'extra' for 'longctx inspect'" "$BIN" inspect "$M" extra
expect_usage negative_threads "--threads: must not be negative (got -4" "$BIN" generate -m "$NOPE" -p hi -t -4
expect_usage bad_device "unknown device 'gpu' (expected cpu, cuda or auto)" "$BIN" generate -m "$NOPE" -p hi --device gpu
expect_usage bad_kv "unknown KV cache type 'fp4'" "$BIN" generate -m "$NOPE" -p hi --kv-cache fp4
expect_usage bad_attn_tiles "unknown attention tile type 'fp4'" "$BIN" generate -m "$NOPE" -p hi --attn-tiles fp4
expect_usage bench_attn_tiles "unknown attention tile type 'fp4'" "$BIN" bench model -m "$NOPE" --attn-tiles fp4
expect_usage bad_cpu_weights "unknown CPU weights 'int4' (expected quantized or fp32)" \
  "$BIN" generate -m "$NOPE" -p hi --cpu-weights int4
expect_usage bench_cpu_weights "unknown CPU weights 'int4'" "$BIN" bench model -m "$NOPE" --cpu-weights int4
expect_usage serve_cpu_weights "unknown CPU weights 'int4'" "$BIN" serve -m "$NOPE" --cpu-weights int4
expect_usage missing_file "no such file '$TMP/nofile.txt'" "$BIN" generate -m "$NOPE" -f "$TMP/nofile.txt"
expect_usage folder_file "is a folder, not a file" "$BIN" generate -m "$NOPE" -f "$TMP"
expect_usage past_context "-c 100000 is past the trained context" "$BIN" generate -m "$M" -p hi -c 100000
expect_in past_context_hint "--extrapolate" err
expect_usage bench_bad_json "cannot write '/nonexistent/x': the folder '/nonexistent' does not exist" \
  "$BIN" bench model -m "$NOPE" --json /nonexistent/x
expect_usage bench_geometry "--random-weights: unknown geometry 'bogus' (known: llama3-8b" \
  "$BIN" bench model --random-weights bogus --device cuda
expect_usage bench_geometry_layers "layer count after ':'" "$BIN" bench model --random-weights llama3-8b:99
expect_usage bad_length "bad length '12q'" "$BIN" bench model -m "$NOPE" --lengths 12q
expect_usage bench_threads "--threads: must not be negative" "$BIN" bench model -m "$NOPE" -t -1
expect_usage bench_device "unknown device 'tpu'" "$BIN" bench model -m "$NOPE" --device tpu
expect_usage bench_chunk "--prefill-chunk: must be at least 1" "$BIN" bench model -m "$NOPE" --prefill-chunk 0
expect_usage tiny_context "--trained-context: must be at least 1" "$BIN" tiny-model --out "$TMP/t" --trained-context 0
if "$BIN" --help | grep -q "^  eval"; then
  expect_usage eval_threads "--threads: must not be negative (got -4" "$BIN" eval passkey -m "$NOPE" --threads -4
  expect_usage eval_device "unknown device 'gpu'" "$BIN" eval passkey -m "$NOPE" --device gpu
  expect_usage eval_seed "--seed: must not be negative (got -1)" "$BIN" eval passkey -m "$NOPE" --seed -1
  expect_usage eval_samples "--samples: must be at least 1 (got 0)" "$BIN" eval passkey -m "$NOPE" --samples 0
  expect_usage eval_json "is not a folder" "$BIN" eval passkey -m "$NOPE" --json "$M/x.json"
  expect_usage eval_out "is a file, not a folder" "$BIN" eval passkey -m "$NOPE" --out "$M"
  expect_usage eval_context "-c 100000 is past the trained context" "$BIN" eval passkey -m "$M" -c 100000
fi
if "$BIN" --help | grep -q "^  search-patterns"; then
  printf 'the theater was full. ' >"$TMP/sample.txt"
  expect_usage search_output "cannot write '/nonexistent/dir/x.json': the folder '/nonexistent/dir' does not exist" \
    "$BIN" search-patterns -m "$M" --sample "$TMP/sample.txt" -o /nonexistent/dir/x.json
  expect_usage search_report "cannot write '/nonexistent/r.json'" \
    "$BIN" search-patterns -m "$M" --sample "$TMP/sample.txt" -o "$TMP/s.json" --report /nonexistent/r.json
  expect_usage search_old_name "unknown option '--max-tokens'" \
    "$BIN" search-patterns -m "$M" --sample "$TMP/sample.txt" -o "$TMP/s.json" --max-tokens 5
  expect_usage search_geometry "--random-weights: unknown geometry 'bogus'" \
    "$BIN" search-patterns --random-weights bogus --random-tokens 5 -o "$TMP/s.json"
  expect_usage search_device "unknown device 'gpu'" "$BIN" search-patterns -m "$M" --sample "$TMP/sample.txt" -o "$TMP/s.json" --device gpu
  expect_fail search_no_sample "give a sample prompt with --sample FILE" "$BIN" search-patterns -m "$M" -o "$TMP/s.json"
  expect_fail search_random_no_tokens "takes --random-tokens N" "$BIN" search-patterns --random-weights llama3-8b -o "$TMP/s.json"
  expect_fail search_tokens_no_random "are for --random-weights" "$BIN" search-patterns -m "$M" --sample "$TMP/s.json" --random-tokens 5 -o "$TMP/s.json"
fi

# Bad input found while working: exit 1.
expect_fail missing_model "nope.gguf" "$BIN" generate -m "$NOPE" -p hi
expect_fail not_a_model "is not a model file" "$BIN" generate -m /etc/hostname -p hi
printf 'hello' >"$TMP/junk.bin"
expect_fail junk_model "junk.bin" "$BIN" inspect "$TMP/junk.bin"
expect_fail unknown_attn "unknown attention method 'bogus'" "$BIN" generate -m "$M" -p hi --attn bogus
expect_fail kv_offload_cpu "--kv-offload is a GPU option" "$BIN" generate -m "$M" -p hi --kv-offload
expect_fail serve_kv_offload_cpu "--kv-offload is a GPU option" "$BIN" serve -m "$M" --kv-offload --port 1
expect_usage kv_host_layers "--kv-host-layers" "$BIN" bench model -m "$NOPE" --kv-offload --kv-host-layers -3
expect_usage kv_page_table "--kv-page-table: tree not in {auto,vector,hash}" "$BIN" bench model -m "$NOPE" --kv-offload --kv-page-table tree
expect_usage kv_offload_residual "--kv-offload-residual: cpu not in {host,gpu}" "$BIN" bench model -m "$NOPE" --kv-offload --kv-offload-residual cpu
expect_fail tokenselect_local "tokenselect: n_local (64) must be >= chunk (512)" "$BIN" generate -m "$M" -p hi --attn tokenselect=n_local=64
expect_fail tokenselect_layout "different key layouts" "$BIN" generate -m "$M" -p hi --attn 'prefill:a_shape;decode:tokenselect'
expect_fail self_extend_group "self_extend group size G must be in" "$BIN" generate -m "$M" -p hi --attn dense=self_extend=0:64
expect_fail self_extend_window "self_extend neighbour window W must be" "$BIN" generate -m "$M" -p hi --attn hip=self_extend=4:x
expect_fail self_extend_form "self_extend must be G:W" "$BIN" eval passkey -m "$M" --attn dense=self_extend=4
expect_fail too_long "context" "$BIN" generate -m "$M" -p "the theater the theater the theater" -c 8 -n 1
expect_fail budget "lower -n" "$BIN" generate -m "$M" -p "the theater" -c 16 -n 100
head -c 1000 "$M" >"$TMP/trunc.gguf"
expect_fail truncated "trunc.gguf" "$BIN" generate -m "$TMP/trunc.gguf" -p hi

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
