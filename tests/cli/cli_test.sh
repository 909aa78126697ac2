#!/usr/bin/env bash
# cli_test.sh: the `longctx` binary end to end on a tiny model: the happy path works and every
# kind of bad input gets a clear message and a non-zero exit (never a crash).
# Run: tests/cli/cli_test.sh build/src/cli/longctx   (CTest runs it as cli_test)
set -u
BIN=${1:?usage: cli_test.sh PATH/TO/longctx}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0

# expect_fail NAME NEEDLE CMD...: CMD must exit 1 or 2 (not crash) and print NEEDLE on stderr.
expect_fail() {
  local name=$1 needle=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [[ $rc -ne 0 && $rc -lt 128 ]] && grep -qF -- "$needle" "$TMP/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL $name: rc=$rc, wanted '$needle' in stderr:"; cat "$TMP/err"
  fi
}
# expect_ok NAME CMD...: CMD must exit 0.
expect_ok() {
  local name=$1; shift
  if "$@" >"$TMP/out" 2>"$TMP/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name:"; cat "$TMP/err"; fi
}

expect_ok tiny "$BIN" tiny-model --out "$TMP/m"
M="$TMP/m/tiny.gguf"
expect_ok generate "$BIN" generate -m "$M" -p "the theater" -n 5 -q
expect_ok generate_json "$BIN" generate -m "$M" -p "the theater" -n 5 --json
python3 -c "import json,sys; d=json.load(open('$TMP/out')); assert len(d['tokens'])==5 and d['timings']['prefill_s']>0" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL json output"; cat "$TMP/out"; }
expect_ok generate_hf "$BIN" generate -m "$TMP/m/hf" --chat "hi" -n 3 --temp 0.8 --top-k 5 --top-p 0.9 --seed 1 -q
expect_ok inspect "$BIN" inspect "$M"
grep -q "tiny llama" "$TMP/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL inspect output"; }

expect_fail no_subcommand "subcommand is required" "$BIN"
expect_fail no_prompt "needs a prompt" "$BIN" generate -m "$M"
expect_fail missing_model "nope.gguf" "$BIN" generate -m "$TMP/nope.gguf" -p hi
expect_fail not_a_model "is not a model file" "$BIN" generate -m /etc/hostname -p hi
printf 'hello' >"$TMP/junk.bin"
expect_fail junk_model "junk.bin" "$BIN" inspect "$TMP/junk.bin"
expect_fail unknown_attn "unknown attention method 'bogus'" "$BIN" generate -m "$M" -p hi --attn bogus
expect_fail bad_top_p "top-p" "$BIN" generate -m "$M" -p hi --top-p 2
expect_fail negative_n "max-tokens" "$BIN" generate -m "$M" -p hi -n -3
expect_fail search_no_sample "give a sample prompt with --sample FILE" "$BIN" search-patterns -m "$M" -o "$TMP/s.json"
expect_fail search_random_no_tokens "takes --random-tokens N" "$BIN" search-patterns --random-weights llama3-8b -o "$TMP/s.json"
expect_fail search_tokens_no_random "are for --random-weights" "$BIN" search-patterns -m "$M" --sample "$TMP/s.json" --random-tokens 5 -o "$TMP/s.json"
expect_fail unknown_flag "--frobnicate" "$BIN" generate -m "$M" -p hi --frobnicate
expect_fail too_long "context" "$BIN" generate -m "$M" -p "the theater the theater the theater" -c 8 -n 1
expect_fail budget "lower -n" "$BIN" generate -m "$M" -p "the theater" -c 16 -n 100
expect_fail missing_file "nofile.txt" "$BIN" generate -m "$M" -f "$TMP/nofile.txt"
head -c 1000 "$M" >"$TMP/trunc.gguf"
expect_fail truncated "trunc.gguf" "$BIN" generate -m "$TMP/trunc.gguf" -p hi
expect_fail bad_length "bad length" "$BIN" bench model -m "$M" --lengths 12q

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
