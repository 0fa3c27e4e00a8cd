#!/usr/bin/env bash
# Reproduces docs/benchmarks.md: every figure there comes from one run of
# this script on one machine, with llama.cpp (node-llama-cpp, tools/node)
# measured in the same run on the same files and thread counts.
#
#   bash tools/bench/run.sh [OUTDIR]     # default /tmp/bulkhead-bench
#
# Needs: Go, and `cd tools/node && npm ci --omit=optional --ignore-scripts`.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/bulkhead-bench}
mkdir -p "$out"
bh="$out/bulkhead"
go build -o "$bh" ./cmd/bulkhead
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"

# start NAME PORT READYPATH ARGS...: runs `bulkhead ARGS` in the background,
# logging to $out/NAME.log, and waits until http://127.0.0.1:PORT/READYPATH
# answers. stop ends it.
pid=
trap 'if [ -n "$pid" ]; then kill $pid 2>/dev/null || true; fi' EXIT
start() {
  local name=$1 port=$2 ready=$3; shift 3
  "$bh" "$@" >"$out/$name.log" 2>&1 &
  pid=$!
  for i in $(seq 300); do curl -sf "127.0.0.1:$port/$ready" >/dev/null && return; sleep 0.2; done
  echo "$name did not become ready; see $out/$name.log" >&2
  return 1
}
stop() { kill $pid; wait $pid 2>/dev/null || true; pid=; }

# Models: random weights at the 110M shape (dim 768, hidden 2048, 12 layers, 12 heads).
for t in f32 q8_0 q4_k q5_k q6_k q5_0 q4_0; do
  [ -f "$out/r110m-$t.gguf" ] || "$bh" convert --random 110M --type "$t" --out "$out/r110m-$t.gguf"
done

echo "== bench model: Bulkhead vs llama.cpp, same file, same threads"
for t in q8_0 f32 q4_k; do
  for th in 1 2; do
    "$bh" bench model --model "$out/r110m-$t.gguf" --threads "$th" --reps 3 --peer --json | tail -1 | tee -a "$out/model.jsonl"
  done
done

echo "== kernel families: auto (AVX-512 VNNI where the CPU has it) against BULKHEAD_KERNELS=avx2, Q8_0, 2 threads, alternating"
for k in avx2 auto avx2 auto; do
  BULKHEAD_KERNELS=$k "$bh" bench model --model "$out/r110m-q8_0.gguf" --threads 2 --reps 3 --json | tail -1 | sed "s/^/$k /" | tee -a "$out/families.txt"
done

echo "== bench model, the other quantised types, 2 threads"
for t in q5_k q6_k q5_0 q4_0; do
  "$bh" bench model --model "$out/r110m-$t.gguf" --threads 2 --reps 3 --peer --json | tail -1 | tee -a "$out/model.jsonl"
done

echo "== bench model with an f16 KV cache (kv.dtype: f16; the llama.cpp peer uses f16 in every run)"
for t in q8_0 q4_k; do
  "$bh" bench model --model "$out/r110m-$t.gguf" --threads 2 --reps 3 --kv-dtype f16 --peer --json | tail -1 | tee -a "$out/model-f16kv.jsonl"
done

echo "== start to first token, embedded model (bulkhead generate --max-tokens 1), 10 runs"
for i in $(seq 10); do
  s=$(date +%s%N); "$bh" generate --prompt "Once upon a time" --max-tokens 1 >/dev/null; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 ))
done | sort -n | awk '{a[NR]=$1} END {print "ms: min " a[1] ", median " a[int((NR+1)/2)] ", max " a[NR]}' | tee "$out/ttft-generate.txt"

echo "== bench load against serve (110M Q8_0): concurrency 1, 8, 32"
cat > "$out/serve.yaml" <<YAML
model: $out/r110m-q8_0.gguf
context_len: 512
batch_tokens: 512
max_sequences: 64
kv:
  page_size: 16
  pages: 1280
YAML
start serve 18181 health serve --config "$out/serve.yaml" --listen 127.0.0.1:18181
# Decode-bound: short prompts, long outputs, so batching is what is measured.
"$bh" bench load --target http://127.0.0.1:18181 --concurrency 1,8,32 --requests 32 --max-tokens 128 --prompt-tokens 8 --warmup 2 --json | tee "$out/load-serve-decode.jsonl" || true
# Mixed: ~130-token prompts and 64-token outputs.
"$bh" bench load --target http://127.0.0.1:18181 --concurrency 1,8,32 --requests 32 --max-tokens 64 --prompt-tokens 64 --warmup 2 --json | tee "$out/load-serve.jsonl" || true
stop

echo "== bench load against serve with an f16 KV cache, decode-bound"
sed 's/^kv:$/kv:\n  dtype: f16/' "$out/serve.yaml" > "$out/serve-f16.yaml"
start serve-f16 18184 health serve --config "$out/serve-f16.yaml" --listen 127.0.0.1:18184
"$bh" bench load --target http://127.0.0.1:18184 --concurrency 1,8,32 --requests 32 --max-tokens 128 --prompt-tokens 8 --warmup 2 --json | tee "$out/load-serve-f16-decode.jsonl" || true
stop

echo "== bench load against a cluster: router + 1 prefill + 1 decode (110M Q8_0)"
start cluster 18182 ready cluster --prefill 1 --decode 1 --config "$out/serve.yaml" --listen 127.0.0.1:18182
"$bh" bench load --target http://127.0.0.1:18182 --concurrency 1,8,32 --requests 32 --max-tokens 128 --prompt-tokens 8 --warmup 2 --json | tee "$out/load-cluster-decode.jsonl" || true
"$bh" bench load --target http://127.0.0.1:18182 --concurrency 1,8,32 --requests 32 --max-tokens 64 --prompt-tokens 64 --warmup 2 --json | tee "$out/load-cluster.jsonl" || true
stop

echo "== serve with the isolation machinery off (kv.scrub: off; tag checks stay on), decode-bound"
sed 's/^kv:$/kv:\n  scrub: off/' "$out/serve.yaml" > "$out/serve-noscrub.yaml"
start serve-noscrub 18183 health serve --config "$out/serve-noscrub.yaml" --listen 127.0.0.1:18183
"$bh" bench load --target http://127.0.0.1:18183 --concurrency 32 --requests 32 --max-tokens 128 --prompt-tokens 8 --warmup 2 --json | tee "$out/load-serve-noscrub.jsonl" || true
stop

echo "== KV transfer vs raw TCP over loopback; cost of isolation (tag checks + scrubbing)"
go test -run '^$' -bench 'TransferVsRaw' -benchtime 20x -count 3 ./internal/transfer/ | tee "$out/transfer.txt"
go test -run '^$' -bench 'IsolationCost' -benchtime 20x ./internal/engine/ | tee "$out/isolation.txt"

echo "== engine alone (no HTTP): aggregate decode of 1, 8 and 32 streams, 110M Q8_0"
go test -run '^$' -bench 'BatchedDecode' -benchtime 2x ./internal/engine/ | tee "$out/batched.txt"
