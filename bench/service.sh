#!/usr/bin/env bash
# Issue 3's service benchmark: ShouldRateLimit over loopback gRPC, 64 callers
# on 4 connections, against the do-nothing handler, the server on its
# in-memory store, the server on Redis, and an over-limit flood on Redis
# (the flag cache at work), and the sidecar (sync and async, uniform and zipf
# keys) in front of the server on Redis, back to back in one run. Everything
# on the server side (redis-server, server, sidecar) runs on core 0 and the
# load generator on core 1 (taskset), the same for every row.
# Usage: bench/service.sh [duration per row, default 5s]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-5s}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
go build -o "$out/loadgen" ./cmd/loadgen
go build -o "$out/server" ./cmd/server
go build -o "$out/localfilter" ./cmd/localfilter
cat > "$out/limits.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 1000000000}
  - key: flood
    rate_limit: {name: flood, unit: hour, requests_per_unit: 1}
YAML
taskset -c 0 redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
sleep 0.5
load() { # name, then loadgen flags
  local name=$1; shift
  taskset -c 1 "$out/loadgen" -target "127.0.0.1:${port:-18081}" -concurrency 64 -conns 4 -duration "$dur" -warmup 1s -domain bench -json "$@" \
    | python3 -c "import json,sys; r=json.load(sys.stdin); l=r['latency_us']; rd=r.get('redis'); f=lambda k: '%.3f' % rd[k] if rd else '-'; print('| $name | %.0f | %.0f | %.0f | %.0f | %d | %d | %s | %s | %s |' % (r['rps'], l['p50'], l['p99'], l['p99_9'], r['ok'], r['over_limit'], f('reads_per_req'), f('scripts_per_req'), f('commands_per_req')))"
}
serve() { # args of the server
  taskset -c 0 "$@" >"$out/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/18081) 2>/dev/null && break; sleep 0.1; done
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; }

echo "| configuration | req/s | p50 µs | p99 µs | p99.9 µs | OK | over limit | Redis round trips/req (read events) | scripts/req | Redis commands/req (incl. inside scripts) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
serve "$out/loadgen" -serve-noop 127.0.0.1:18081
load "do-nothing handler" -descriptors 'client=c%d' -keys 10000; stop
serve "$out/server" -config "$out/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080
load "server, in-memory, 10k keys" -descriptors 'client=c%d' -keys 10000; stop
serve "$out/server" -config "$out/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 -redis-url redis://127.0.0.1:16399 -store-timeout 100ms
load "server + Redis, 10k keys" -descriptors 'client=c%d' -keys 10000 -redis-addr 127.0.0.1:16399
load "server + Redis, over-limit flood, flag cache on" -descriptors 'flood=f' -keys 1 -redis-addr 127.0.0.1:16399; stop
serve "$out/server" -config "$out/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 -redis-url redis://127.0.0.1:16399 -store-timeout 100ms -cache-size 0
load "server + Redis, over-limit flood, flag cache off" -descriptors 'flood=g' -keys 1 -redis-addr 127.0.0.1:16399; stop

# The sidecar on :19081 in front of the server on Redis.
serve "$out/server" -config "$out/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 -redis-url redis://127.0.0.1:16399 -store-timeout 100ms
server_pid=$pid
for mode in sync async; do
  taskset -c 0 "$out/localfilter" -config "$out/limits.yaml" -upstream 127.0.0.1:18081 -grpc-addr 127.0.0.1:19081 -http-addr 127.0.0.1:19080 -mode $mode -upstream-timeout 100ms >"$out/lf.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/19081) 2>/dev/null && break; sleep 0.1; done
  port=19081 load "sidecar $mode → server + Redis, 10k keys uniform" -descriptors 'client=c%d' -keys 10000 -redis-addr 127.0.0.1:16399
  port=19081 load "sidecar $mode → server + Redis, 10k keys zipf" -descriptors 'client=z%d' -keys 10000 -dist zipf -redis-addr 127.0.0.1:16399
  stop
done
pid=$server_pid; stop
