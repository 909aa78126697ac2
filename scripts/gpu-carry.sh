# gpu-carry.sh: shell functions shared by the device scripts (scripts/gpu-*.sh: packing here, the
# steps there). Source it; it defines functions and constants only. A script that runs on the
# device sources it from its own folder, so its --pack copies this file into the carry folder.
#   carry_pack BUILD CARRY PART   here: stripped longctx + test_gpu as one .tar.xz, the shared
#                                 libraries the GPU machine lacks, and optionally one half
#                                 (PART 1 or 2) of the default model (too big for one transfer)
#   carry_libs DEST BINARY...    here: copy the shared libraries the binaries need beyond the GPU
#                                 machine's own (CUDA, libc) into DEST (also used by the --pack
#                                 modes of gpu-suite.sh and gpu-tokenselect.sh)
#   carry_unpack CARRY BIN        there: unpack the binaries into BIN, point LD_LIBRARY_PATH at
#                                 the carried libraries
#   record_env FILE COMMIT        there: GPU name, clocks, driver, commit, date
#   join_default_model CARRY      there: store carried model halves under $LONGCTX_CACHE and,
#                                 once both are there, join them and check the SHA-256
#   carry_split FILE N PREFIX     here: any model file as N parts, part K in the folder PREFIX<K>
#                                 (one folder per device call), named <file>.part<K>of<N>: parts
#                                 1..N-1 of CARRY_PART_MAX bytes, the last the rest (refused when
#                                 the rest is more), so the last call has room for the binaries
#   join_model CARRY NAME SHA     there: store the parts of NAME found in CARRY under
#                                 $LONGCTX_CACHE/models and, once all N are there, join them into
#                                 NAME and check its SHA-256 (the parts are removed either way)
#   step NAME LIMIT_S CMD...      there: one step of a device script (below)
#   carry_model_xz DIR1 DIR2      here: the default model as xz, split in two: DIR1/model.xz.part1 (the
#                                 first MODEL_XZ_PART1 bytes) and DIR2/model.xz.part2 (the rest)
#   join_model_xz PART2           there: join the default model from part 1 (stored under
#                                 $LONGCTX_CACHE/models by an earlier call) and PART2 (a path: this
#                                 call's, or an earlier call's stored copy); checks the SHA-256
#   unpack_bin TARBALL DIR [LIB]  there: the packed binaries afresh into DIR (a warm machine may
#                                 hold an older pack), LD_LIBRARY_PATH to LIB (default DIR/lib)
#   pack_ab TMP CARRY MAIN_BENCH SCRIPT [FILE...]  here: the last step of an A/B pack
#                                 (scripts/gpu-hip-*.sh): main's longctx_bench_hip (none when
#                                 MAIN_BENCH is "") beside the branch's binaries already in TMP (as
#                                 longctx_bench_hip_main), all stripped, their libraries, one
#                                 CARRY/bins.tar.xz, SCRIPT, this file and the FILEs beside it
#   out_archive NAME ARCHIVE FILE...  there: the steps write to a fresh folder $OUT (/tmp/NAME.*);
#                                 on exit it all goes to ARCHIVE in the caller's $OUT (now $FINAL)
#                                 and FILEs are copied beside it (a call returns only ~8 files)
# Why: the GPU machine has no registry and no -dev packages; a file of ~100 MB must travel in two
# calls made back to back (files under /root survive while the machine stays warm between them),
# gemma-3-270m's 253 MB (241.4 MiB) in five. Everything that travels in one call (the lead's
# checkout, 8.4 MiB of tracked files, plus the carried folder) must stay under 64 MiB, hence
# CARRY_PART_MAX's default of 54 MiB (a margin for the checkout's growth). Compression does not
# save a call: zstd -3 takes 6% off the Q4_K_M file (227 MiB, still over four parts).
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

carry_libs() {
  local dest=$1 lib; shift
  mkdir -p "$dest"
  for lib in $(ldd "$@" | awk '/=> \// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|ld-linux*|libcublas*|libcuda*) ;;
      *) cp -L "$lib" "$dest/" ;;
    esac
  done
}

pack_ab() {
  local tmp=$1 c=$2 main_bench=$3 script=$4
  shift 4
  [ -z "$main_bench" ] || cp "$main_bench" "$tmp/longctx_bench_hip_main"
  strip "$tmp"/*
  carry_libs "$tmp/lib" "$tmp"/*
  tar -C "$tmp" -cJf "$c/bins.tar.xz" .
  cp "$script" "$(dirname "${BASH_SOURCE[0]}")/gpu-carry.sh" "$@" "$c/"
  ls -la "$c"; du -sh "$c"
}

carry_pack() {
  local build=$1 carry=$2 part=${3:-} tmp=/tmp/gpu-carry-pack
  rm -rf "$carry" "$tmp" && mkdir -p "$carry/lib" "$tmp"
  cp "$build/src/cli/longctx" "$build/tests/gpu/test_gpu" "$tmp/"
  strip "$tmp/longctx" "$tmp/test_gpu"
  tar -C "$tmp" -cJf "$carry/bin.tar.xz" longctx test_gpu
  carry_libs "$carry/lib" "$build/src/cli/longctx" "$build/tests/gpu/test_gpu"
  if [ -n "$part" ]; then
    local m="${LONGCTX_CACHE:-$HOME/.cache/longctx}/models/$MODEL_NAME"
    local half=$(( ($(stat -c %s "$m") + 1) / 2 ))
    if [ "$part" = 1 ]; then head -c $half "$m" > "$carry/model.part1"; else tail -c +$((half + 1)) "$m" > "$carry/model.part2"; fi
  fi
  ls -la "$carry" "$carry/lib"; du -sh "$carry"
}

carry_unpack() {
  local carry=$1 bin=$2
  mkdir -p "$bin" && tar -C "$bin" -xJf "$carry/bin.tar.xz" || { echo "no $carry/bin.tar.xz: run --pack here first"; return 2; }
  export LD_LIBRARY_PATH="$PWD/$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

record_env() {
  { nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv;
    echo "commit $2"; date -u; } > "$1" 2>&1
  cat "$1"
}

join_default_model() {
  local carry=$1 mdir="$LONGCTX_CACHE/models" p
  mkdir -p "$mdir"
  for p in 1 2; do
    [ -f "$carry/model.part$p" ] && cp "$carry/model.part$p" "$mdir/$MODEL_NAME.part$p" && echo "model part $p stored"
  done
  if [ ! -f "$mdir/$MODEL_NAME" ] && [ -f "$mdir/$MODEL_NAME.part1" ] && [ -f "$mdir/$MODEL_NAME.part2" ]; then
    cat "$mdir/$MODEL_NAME.part1" "$mdir/$MODEL_NAME.part2" > "$mdir/$MODEL_NAME.tmp"
    if [ "$(sha256sum "$mdir/$MODEL_NAME.tmp" | cut -d' ' -f1)" = "$MODEL_SHA" ]; then
      mv "$mdir/$MODEL_NAME.tmp" "$mdir/$MODEL_NAME"; echo "default model joined, SHA-256 ok"
    else
      echo "default model parts do not match the SHA-256"; rm -f "$mdir/$MODEL_NAME.tmp"
    fi
  fi
}

CARRY_PART_MAX=${CARRY_PART_MAX:-$((54 * 1024 * 1024))}

carry_split() {
  local file=$1 n=$2 prefix=$3 name size k part start len
  name=$(basename "$file")
  [ -f "$file" ] || { echo "carry_split: no $file" >&2; return 2; }
  size=$(stat -c %s "$file")
  if [ $(( size - (n - 1) * CARRY_PART_MAX )) -gt "$CARRY_PART_MAX" ]; then
    echo "carry_split: $name ($size bytes) does not fit $n parts of CARRY_PART_MAX ($CARRY_PART_MAX) bytes" >&2
    return 2
  fi
  for k in $(seq 1 "$n"); do
    part="$prefix$k/$name.part${k}of$n"
    start=$(( (k - 1) * CARRY_PART_MAX )); len=$CARRY_PART_MAX
    [ "$k" = "$n" ] && len=$(( size - start ))
    mkdir -p "$prefix$k" && rm -f "$prefix$k/$name".part*
    tail -c +$(( start + 1 )) "$file" | head -c $len > "$part"
    echo "$part: $(stat -c %s "$part") bytes, sha256 $(sha256sum "$part" | cut -c1-16)"
  done
}

join_model() {
  local carry=$1 name=$2 sha=$3 mdir="$LONGCTX_CACHE/models" p n k first
  mkdir -p "$mdir"
  for p in "$carry/$name".part*of*; do
    [ -f "$p" ] && cp "$p" "$mdir/" && echo "$(basename "$p") stored"
  done
  if [ -f "$mdir/$name" ]; then rm -f "$mdir/$name".part*; echo "$name: already here"; return 0; fi
  first=$(ls "$mdir/$name".part1of* 2>/dev/null | head -1)
  [ -n "$first" ] || { echo "$name: part 1 not here (send the part calls first)"; return 1; }
  n=${first##*of}
  for k in $(seq 1 "$n"); do
    [ -f "$mdir/$name.part${k}of$n" ] || { echo "$name: part $k of $n not here yet"; return 1; }
  done
  for k in $(seq 1 "$n"); do cat "$mdir/$name.part${k}of$n"; done > "$mdir/$name.tmp"
  rm -f "$mdir/$name".part*
  if [ "$(sha256sum "$mdir/$name.tmp" | cut -d' ' -f1)" = "$sha" ]; then
    mv "$mdir/$name.tmp" "$mdir/$name"; echo "$name joined from $n parts, SHA-256 ok"
  else
    rm -f "$mdir/$name.tmp"; echo "$name: the joined parts do not match the SHA-256 $sha"; return 1
  fi
}

# step NAME LIMIT_S CMD...: one step of a device script. CMD runs under `timeout`, its limit cut to
# what is left of the call's budget when the script sets STEP_BUDGET_S (seconds from STEP_T0, the
# script's start); with less than STEP_MIN_S (default 10) left the step is skipped. Output in
# $STEP_DIR/NAME.log (STEP_DIR defaults to $OUT; with STEP_SPLIT=1 stdout goes to NAME.txt and
# stderr to NAME.log). Then the script's own step_show NAME RC, when it defines one (its digest of
# the log), and one line "== NAME rc=RC Ns ..." on stdout and appended to STEP_SUMMARY (default
# $OUT/summary.txt). A failed or skipped step sets status=1 and returns non-zero.
# Why one function: every device call is cut off at its limit, so each step must end in time and
# leave its log and rc behind whatever happens to the next.
step() {
  local name=$1 limit=$2 t0 left rc dir=${STEP_DIR:-$OUT} summary=${STEP_SUMMARY:-$OUT/summary.txt}
  shift 2
  t0=$(date +%s)
  if [ -n "${STEP_BUDGET_S:-}" ]; then
    left=$(( STEP_BUDGET_S - (t0 - ${STEP_T0:-$t0}) ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt "${STEP_MIN_S:-10}" ]; then
      echo "== $name SKIPPED (budget spent: ${left}s left)" | tee -a "$summary"
      status=1
      return 1
    fi
  fi
  mkdir -p "$dir"
  echo "== $name (limit ${limit}s, $(date -u +%T)): $*"
  if [ "${STEP_SPLIT:-0}" = 1 ]; then
    timeout "$limit" "$@" > "$dir/$name.txt" 2> "$dir/$name.log"
  else
    timeout "$limit" "$@" > "$dir/$name.log" 2>&1
  fi
  rc=$?
  if declare -F step_show > /dev/null; then step_show "$name" "$rc"; fi
  echo "== $name rc=$rc $(( $(date +%s) - t0 ))s (limit ${limit}s, at $(( $(date +%s) - ${STEP_T0:-$t0} ))s)" |
    tee -a "$summary"
  [ "$rc" = 0 ] || status=1
  return "$rc"
}

unpack_bin() {
  local tarball=$1 dir=$2 lib=${3:-$2/lib}
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf "$tarball" || { echo "no $tarball: run --pack here first"; exit 2; }
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The opening of a device script whose steps log under LOGDIR (a folder of $OUT): the binaries of
# TARBALL unpacked into BINDIR (their libraries on LD_LIBRARY_PATH), the card and commit
# ($GIT_COMMIT) in LOGDIR/env.txt, and step's limits cut to what is left of BUDGET seconds from now
# (STEP_T0); after each step the logs are archived again ($OUT/all-logs.tgz), so a call cut off at
# its limit still brings back every finished step's log.
step_session() {
  local tarball=$1 bindir=$2 logdir=$3 budget=$4
  unpack_bin "$tarball" "$bindir"
  mkdir -p "$logdir"
  record_env "$logdir/env.txt" "${GIT_COMMIT:-unknown}"
  status=0
  STEP_DIR=$logdir STEP_BUDGET_S=$budget STEP_T0=$(date +%s) STEP_MIN_S=5
  STEP_ARCHIVE_DIR=$(basename "$logdir")
  step_show() { tar -C "$OUT" -czf "$OUT/all-logs.tgz" "$STEP_ARCHIVE_DIR"; }
}

out_archive() {
  local name=$1
  FINAL=${OUT:-out} OUT_ARCHIVE=$2
  shift 2
  OUT_KEEP="$*"
  OUT=$(mktemp -d "/tmp/$name.XXXXXX")
  mkdir -p "$FINAL"
  trap pack_out EXIT
}
pack_out() {
  local f
  tar -czf "$FINAL/$OUT_ARCHIVE" -C "$OUT" .
  for f in $OUT_KEEP; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL/"; done
  return 0
}

# The default model travels as xz (98.4 MB -> 90.5 MB) in two calls made back to back: part 1 beside
# a call's small files, part 2 beside the binaries (each call: 64 MiB with the checkout).
carry_model_xz() {
  local d1=$1 d2=$2 part1=${MODEL_XZ_PART1:-49800000} tmp
  tmp=$(mktemp) || return 2
  xz -6 -T2 -c "${LONGCTX_CACHE:-$HOME/.cache/longctx}/models/$MODEL_NAME" > "$tmp" || return 2
  mkdir -p "$d1" "$d2"
  head -c "$part1" "$tmp" > "$d1/model.xz.part1"
  tail -c +$(( part1 + 1 )) "$tmp" > "$d2/model.xz.part2"
  rm -f "$tmp"
}
# There: $LONGCTX_CACHE/models/$MODEL_NAME from part 1 (copied into that folder by the earlier
# call) and PART2; returns non-zero (and says why) when part 1 is missing or the SHA-256 differs.
join_model_xz() {
  local m=$LONGCTX_CACHE/models
  [ -f "$m/$MODEL_NAME" ] && return 0
  [ -f "$m/model.xz.part1" ] || { echo "DEFAULT MODEL NOT HERE (part 1 missing: a fresh machine)"; return 1; }
  cat "$m/model.xz.part1" "$1" | xz -d > "$m/$MODEL_NAME.tmp"
  if [ "$(sha256sum "$m/$MODEL_NAME.tmp" | cut -d' ' -f1)" = "$MODEL_SHA" ]; then
    mv "$m/$MODEL_NAME.tmp" "$m/$MODEL_NAME" && echo "$MODEL_NAME joined, SHA-256 ok"
  else
    echo "$MODEL_NAME: SHA-256 mismatch"; return 1
  fi
}
