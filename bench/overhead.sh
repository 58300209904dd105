#!/usr/bin/env bash
# overhead.sh: sluice's CPU a request over the do-nothing handler's, both
# serving at once on core 0: issue 25's "in memory ÷ the handler" and "the
# async sidecar's own CPU ÷ the handler's", measured so that both sides see
# the same minute of a shared machine.
#
# bench/run.sh measures each row on its own, one after another; there the
# handler's row and a sluice row minutes later differ by the host's speed
# as much as by sluice's own work (20-30 % from minute to minute here). As
# bench/sidebyside.sh does for two revisions, this runs the handler
# (loadgen -serve-noop) and one of sluice's daemons at once on core 0, each
# with its own load generator on core 1 (half the callers each, keys of its
# own, a warm-up, then the measured phase), and compares their CPU a
# request (loadgen -cpu-pids). The runs alternate which side takes which
# port, and the result is the geometric mean of the two orientations'
# medians, which cancels a port's own cost.
#
# Scenarios: memory (the server on its in-memory store, 10k keys); sidecar
# (an async sidecar, 10k keys far below their limits, in front of a server
# on Redis; the server and Redis also on core 0, their CPU not counted);
# half (the same, 5k keys asked for at about half their limit of 300 a
# minute; the fraction is printed). A sidecar's run in which it decided
# anything without the central state (fallback, shed, dropped hits, the
# upstream marked down) fails, as a run with a failed request does.
#
# Usage: bench/overhead.sh [-n 4] [-d 6s] [-w 14s] [-s "memory sidecar half"]
#   -n  runs per scenario, alternating the ports (even: at least 2)
#   -d  measured phase; -w warm-up (default: 14s for a sidecar, so that
#       its allowances have settled and its first holds, -loose-hold's
#       10 s, have ended; 2s otherwise: common.sh's warm_for)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
runs=4
dur=6s
warm=""
scenarios="memory sidecar half"
while getopts "n:d:w:s:" opt; do
  case $opt in
    n) runs=$OPTARG ;;
    d) dur=$OPTARG ;;
    w) warm=$OPTARG ;;
    s) scenarios=$OPTARG ;;
    *) exit 2 ;;
  esac
done
need_tools redis-server taskset python3

bin=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$bin"
}
trap cleanup EXIT
go build -tags vtprotobuf -o "$bin/" ./cmd/loadgen ./cmd/server ./cmd/localfilter
bench_limits "$bin/limits.yaml"
sidecar_tokens "$bin"
redis=(-redis-url redis://127.0.0.1:16399 -store-timeout 100ms -redis-state-format packed)

# launch SIDE PORT: starts SIDE (noop, or sluice's daemon of the scenario)
# on core 0, serving gRPC on PORT (and its metrics on PORT-1), and prints
# its pid.
launch() {
  local side=$1 port=$2
  case $side in
    noop)
      taskset -c 0 "$bin/loadgen" -serve-noop "127.0.0.1:$port" >/dev/null 2>&1 & ;;
    memory)
      taskset -c 0 "$bin/server" -config "$bin/limits.yaml" -grpc-addr "127.0.0.1:$port" -http-addr "127.0.0.1:$((port - 1))" \
        -log-level warn >/dev/null 2>&1 & ;;
    *)
      taskset -c 0 "$bin/localfilter" -config "$bin/limits.yaml" -upstream 127.0.0.1:18085 -mode async -upstream-timeout 100ms \
        -log-level warn -upstream-token-file "$bin/token" -upstream-token-plaintext \
        -grpc-addr "127.0.0.1:$port" -http-addr "127.0.0.1:$((port - 1))" >/dev/null 2>&1 & ;;
  esac
  echo $!
}

# one SCENARIO FIRST SECOND TAG: FIRST on port 18081, SECOND on 18083;
# prints SECOND's CPU a request over FIRST's, both, and their req/s.
one() {
  local scenario=$1 first=$2 second=$3 tag=$4 central=() key=client keys=10000
  case $scenario in
    sidecar) key=loose ;;
    half) key=half keys=5000 ;;
  esac
  if [ "$scenario" != memory ]; then
    taskset -c 0 "$bin/server" -config "$bin/limits.yaml" -grpc-addr 127.0.0.1:18085 -http-addr 127.0.0.1:18084 -log-level warn "${redis[@]}" \
      -sidecar-tokens "$bin/tokens" -sidecar-tokens-plaintext >/dev/null 2>&1 &
    central=($!)
    wait_port 18085
  fi
  local p1 p2
  p1=$(launch "$first" 18081)
  p2=$(launch "$second" 18083)
  wait_port 18081
  wait_port 18083
  local t1="" t2=""
  [ "$first" != noop ] && [ "$scenario" != memory ] && t1=http://127.0.0.1:18080/metrics
  [ "$second" != noop ] && [ "$scenario" != memory ] && t2=http://127.0.0.1:18082/metrics
  load_pair "$bin" "$(warm_for "$scenario" "$warm")" "$dur" 18081 "$key=$tag.1.%d" "$p1" "$t1" 18083 "$key=$tag.2.%d" "$p2" "$t2" \
    -concurrency 32 -conns 2 -domain bench -keys "$keys"
  kill "$p1" "$p2" "${central[@]}"
  wait "$p1" "$p2" "${central[@]}" 2>/dev/null || true
  pair_ratio "$bin"
}

if [[ " $scenarios " != " memory " ]]; then
  taskset -c 0 redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  wait_port 16399
fi
echo "sluice ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified')) against the do-nothing handler: CPU a request, side by side on core 0; $runs runs a scenario of $dur"
for scenario in $scenarios; do
  ratios=()
  for i in $(seq "$runs"); do
    if (( i % 2 )); then
      read -r r c1 c2 q1 q2 < <(one "$scenario" noop "$scenario" "o$scenario$i$RANDOM")
      echo "  $scenario run $i: the handler on the first port ${c1} µs, sluice on the second ${c2} µs ($q1 and $q2 req/s): sluice ÷ handler = $r"
      ratios+=("a$r")
      rps=$q2
    else
      read -r r c1 c2 q1 q2 < <(one "$scenario" "$scenario" noop "o$scenario$i$RANDOM")
      echo "  $scenario run $i: sluice on the first port ${c1} µs, the handler on the second ${c2} µs ($q1 and $q2 req/s): sluice ÷ handler = $(python3 -c "print('%.4f' % (1 / $r))")"
      ratios+=("b$r")
      rps=$q1
    fi
  done
  [ "$scenario" = half ] && echo "  half: keys asked for at $(python3 -c "print('%.2f' % ($rps / 5000 * 60 / 300))") of their limit in the last run"
  orientations "$scenario" sluice "sluice ÷ handler" "${ratios[@]}"
done
