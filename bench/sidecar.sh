#!/usr/bin/env bash
# The sidecar's benchmark (issue 4): cmd/localfilter in sync and async mode
# in front of the server on Redis, uniform and zipf keys, next to the
# do-nothing handler, back to back in one run. With a git revision as the
# second argument, that revision's localfilter is built too and measured in
# the same run (before/after). Everything on the serving side (redis-server,
# server, sidecar, or the do-nothing handler) runs on core 0 and the load
# generator on core 1 (taskset), the same for every row.
#
# Redis round trips per request are counted twice: by the server's go-redis
# hook (sluice_redis_round_trips_total: pipelines and single commands) and
# by Redis's INFO (read events; `commands` also counts the calls made inside
# scripts, so it overstates round trips). The CPU each serving process spent
# per request (utime + stime from /proc over the measured phase) says where
# the time goes, less noisily than throughput on a shared machine.
#
# The CPU column lists the serving processes: the handler alone for the
# ceiling; sidecar + server + redis-server for the sidecar rows.
#
# Usage: bench/sidecar.sh [duration per row, default 5s] [git revision to compare]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-5s}
before=${2:-}
out=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "$before" ] && git worktree remove --force "$out/before-src" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
go build -o "$out/loadgen" ./cmd/loadgen
go build -o "$out/server" ./cmd/server
go build -o "$out/localfilter" ./cmd/localfilter
if [ -n "$before" ]; then
  git worktree add -q --detach "$out/before-src" "$before"
  (cd "$out/before-src" && go build -o "$out/localfilter-before" ./cmd/localfilter)
fi
cat > "$out/limits.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 1000000000}
YAML

wait_port() { for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
trips() { curl -s 127.0.0.1:18080/metrics | awk '/^sluice_redis_round_trips_total /{print $2}'; }
cpu() { for p in "$@"; do awk '{printf "%d ", $14+$15}' "/proc/$p/stat"; done; }  # clock ticks

# row NAME PORT PIDS loadgen-flags...: warm up, then measure, one Markdown
# row; PIDS (comma-separated) are the serving processes whose CPU is shown.
row() {
  local name=$1 port=$2 pids=${3//,/ }; shift 3
  local common=(-target "127.0.0.1:$port" -concurrency 64 -conns 4 -domain bench)
  taskset -c 1 "$out/loadgen" "${common[@]}" -duration 1s "$@" >/dev/null
  local t0=0 t1=0 c0 c1
  [ -n "${with_redis:-}" ] && t0=$(trips)
  c0=$(cpu $pids)
  taskset -c 1 "$out/loadgen" "${common[@]}" -duration "$dur" -json ${with_redis:+-redis-addr 127.0.0.1:16399} "$@" >"$out/row.json"
  c1=$(cpu $pids)
  [ -n "${with_redis:-}" ] && t1=$(trips)
  python3 - "$name" "$t0" "$t1" "$out/row.json" "${ceiling:-0}" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
name, t0, t1, path, ceiling = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3] or 0), sys.argv[4], float(sys.argv[5])
c0, c1, tck = sys.argv[6].split(), sys.argv[7].split(), float(sys.argv[8])
r = json.load(open(path)); l = r['latency_us']; rd = r.get('redis')
sent = r['sent']
f = lambda k: '%.3f' % rd[k] if rd else '–'
hook = '%.4f' % ((t1 - t0) / sent) if rd and sent else '–'
pct = '%.0f%%' % (100 * r['rps'] / ceiling) if ceiling else '100%'
cpu = ' + '.join('%.1f' % ((int(b) - int(a)) / tck * 1e6 / sent) for a, b in zip(c0, c1))
print('| %s | %.0f | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %d |' % (name, r['rps'], pct, l['p50'], l['p99'], l['p99_9'], cpu, hook, f('reads_per_req'), f('commands_per_req'), r.get('errors', 0)))
with open(path + '.rps', 'w') as o: o.write(str(r['rps']))
PY
}

echo "| configuration | req/s | % of ceiling | p50 µs | p99 µs | p99.9 µs | CPU µs/req (serving processes) | Redis round trips/req (hook) | read events/req (INFO) | commands/req (INFO, incl. inside scripts) | errors |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

taskset -c 0 "$out/loadgen" -serve-noop 127.0.0.1:18081 >/dev/null 2>&1 &
noop=$!
wait_port 18081
row "do-nothing handler (the ceiling)" 18081 $noop -descriptors 'client=c%d' -keys 10000
ceiling=$(cat "$out/row.json.rps")
kill $noop; wait $noop 2>/dev/null || true

taskset -c 0 redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
redis=$!
wait_port 16399
taskset -c 0 "$out/server" -config "$out/limits.yaml" -grpc-addr 127.0.0.1:18081 -http-addr 127.0.0.1:18080 \
  -redis-url redis://127.0.0.1:16399 -store-timeout 100ms >"$out/server.log" 2>&1 &
server=$!
wait_port 18081

sidecars=(localfilter)
[ -n "$before" ] && sidecars+=(localfilter-before)
for bin in "${sidecars[@]}"; do
  label=""
  [ "$bin" = localfilter-before ] && label=" (before: $before)"
  for mode in async sync; do
    taskset -c 0 "$out/$bin" -config "$out/limits.yaml" -upstream 127.0.0.1:18081 -grpc-addr 127.0.0.1:19081 \
      -http-addr 127.0.0.1:19080 -mode $mode -upstream-timeout 100ms >"$out/lf.log" 2>&1 &
    lf=$!
    wait_port 19081
    with_redis=1 row "sidecar $mode$label, 10k keys uniform" 19081 $lf,$server,$redis -descriptors "client=u$mode$bin%d" -keys 10000
    with_redis=1 row "sidecar $mode$label, 10k keys zipf" 19081 $lf,$server,$redis -descriptors "client=z$mode$bin%d" -keys 10000 -dist zipf
    kill $lf; wait $lf 2>/dev/null || true
  done
done
