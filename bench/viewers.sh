#!/usr/bin/env bash
# The admin page's cost to the request path: gRPC latency of a steady
# open-loop load on the server (in memory, 10k keys, most of them refused so
# that the page has top keys to show), alone and with VIEWERS clients
# loading the admin page and its refreshed part, each a load every
# INTERVAL seconds (0: as fast as they can, a hostile viewer), in
# interleaved rounds. Prints each round's p50/p99 and the page loads, and
# a summary line: the worst p99 with viewers over the worst p99 alone.
#
# The server is pinned to core 0, the load and the viewers to core 1.
#
# Usage: bench/viewers.sh [-d 10s] [-r 1000] [-v 16] [-i 0.5] [-n 2]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dur=10s
rate=1000
viewers=16
interval=0.5
rounds=2
while getopts "d:r:v:i:n:" opt; do
  case $opt in
    d) dur=$OPTARG ;;
    r) rate=$OPTARG ;;
    v) viewers=$OPTARG ;;
    i) interval=$OPTARG ;;
    n) rounds=$OPTARG ;;
    *) exit 2 ;;
  esac
done
need_tools taskset curl python3
bin=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -tags vtprotobuf -o "$bin/" ./cmd/loadgen ./cmd/server ./bench/viewers
cat >"$bin/limits.yaml" <<'EOF'
domain: loadgen
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
EOF
taskset -c 0 "$bin/server" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18581 -http-addr 127.0.0.1:18580 -log-level warn &
for _ in $(seq 100); do curl -sf http://127.0.0.1:18580/readyz >/dev/null && break; sleep 0.1; done
load=(-target 127.0.0.1:18581 -descriptors "client=c%d" -keys 10000 -rate "$rate" -concurrency 64 -conns 4 -json)
# Every key refused from here on: top keys for every minute the page shows.
taskset -c 1 "$bin/loadgen" "${load[@]}" -duration 3s >/dev/null

secs=${dur%s}
echo "| round | viewers | p50 ms | p99 ms | p99 from the actual send, ms | failed | page loads answered |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for round in $(seq "$rounds"); do
  for v in 0 "$viewers"; do
    echo '{"ok": 0, "refused": 0}' >"$bin/loads"
    if [ "$v" -gt 0 ]; then
      taskset -c 1 "$bin/viewers" -n "$v" -interval "${interval}s" -duration "$((secs + 1))s" \
        http://127.0.0.1:18580/ 'http://127.0.0.1:18580/?part=main' >"$bin/loads" &
      viewing=$!
    fi
    out=$(taskset -c 1 "$bin/loadgen" "${load[@]}" -duration "$dur" -label "viewers=$v")
    if [ "$v" -gt 0 ]; then wait "$viewing"; fi
    loads=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%d (%d refused)" % (r["ok"], r["refused"]))' "$bin/loads")
    echo "$out" | V="$v" R="$round" L="$loads" python3 -c '
import json, os, sys
r = json.load(sys.stdin)
lat = r["latency_us"]
failed = r["errors"] + r["unknown"] + r.get("unsent", 0)
e = os.environ
print("| %s | %s | %.2f | %.2f | %.2f | %d | %s |" % (e["R"], e["V"], lat["p50"] / 1000, lat["p99"] / 1000, r["service_us"]["p99"] / 1000, failed, e["L"]))
' | tee -a "$bin/rows"
  done
done
python3 - "$bin/rows" <<'EOF'
import sys
alone, viewed = [], []
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells[0] in ("round", "---"):
        continue
    (alone if cells[1] == "0" else viewed).append(float(cells[3]))
print(f"\nworst p99 with viewers {max(viewed):.2f} ms over worst alone {max(alone):.2f} ms: {max(viewed) / max(alone):.2f}x")
EOF
