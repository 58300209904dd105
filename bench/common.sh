# Sourced by the bench scripts: what they share.

# need_tools TOOL...: exits naming the first TOOL not installed.
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$0 needs $tool (scripts/install-test-deps.sh installs redis-server)" >&2; exit 1; }
  done
}

# bench_limits FILE: the benchmarks' limits, one config for every server
# (the reference's included: its format is ours).
bench_limits() {
  cat > "$1" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {name: hot, unit: second, requests_per_unit: 1000000000}
  - key: flood
    rate_limit: {name: flood, unit: hour, requests_per_unit: 1}
  # The sidecar rows' keys: far from their limits, which count a minute's
  # hits (a per-second limit remembers a hit for a second, and a sidecar
  # holds a loose key's hits for at most half that: -loose-hold).
  - key: loose
    rate_limit: {name: loose, unit: minute, requests_per_unit: 1000000000}
  # Asked for at about half their rate by the sidecar rows (10k uniform
  # keys at 20-26k req/s: 2-2.6 a second of 5).
  - key: half
    rate_limit: {name: half, unit: minute, requests_per_unit: 300}
YAML
}

# wait_port PORT: wait up to 10 s for something to listen on loopback PORT.
wait_port() {
  for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "nothing listens on :$1" >&2; exit 1
}

# sidecar_tokens DIR: a sidecar's credentials, DIR/tokens for the servers'
# -sidecar-tokens and DIR/token for the sidecar's -upstream-token-file: a
# server takes records (and answers with shares and holds) only from
# sidecars it knows. Plaintext on loopback.
sidecar_tokens() {
  echo "bench-sidecar $(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$1/tokens"
  cut -d' ' -f2 "$1/tokens" > "$1/token"
}

# warm_for SCENARIO WARM: the warm-up of a run of SCENARIO, WARM when
# given (-w), else 14s for a sidecar's (sidecar, half; run.sh's hybrid
# rows) and 2s for the others: a sidecar measured before its first holds
# on loose keys have ended (-loose-hold, 10 s) would be measured sending
# no records at all.
warm_for() {
  if [ -n "$2" ]; then
    echo "$2"
  elif [ "$1" = sidecar ] || [ "$1" = half ]; then
    echo 14s
  else
    echo 2s
  fi
}

# load_pair BIN WARM DUR PORT1 DESC1 PID1 TIER1 PORT2 DESC2 PID2 TIER2 ARGS...:
# two load generators on core 1 at once, one a port, each with its own
# descriptors: a warm-up of WARM, then the measured phase of DUR reporting
# the CPU a request of PIDn, into BIN/j1 and BIN/j2. TIERn, if not empty,
# is a hybrid tier's metrics URL: a run in which it decided anything
# without the central state fails (loadgen -tier-metrics-url). ARGS are
# both generators' other flags.
load_pair() {
  local bin=$1 warm=$2 dur=$3 p1=$4 d1=$5 pid1=$6 t1=$7 p2=$8 d2=$9 pid2=${10} t2=${11}
  shift 11
  local x1=() x2=() w
  [ -n "$t1" ] && x1=(-tier-metrics-url "$t1")
  [ -n "$t2" ] && x2=(-tier-metrics-url "$t2")
  taskset -c 1 "$bin/loadgen" -target "127.0.0.1:$p1" "$@" -descriptors "$d1" -duration "$warm" >/dev/null &
  w=$!
  taskset -c 1 "$bin/loadgen" -target "127.0.0.1:$p2" "$@" -descriptors "$d2" -duration "$warm" >/dev/null &
  wait $w $!
  taskset -c 1 "$bin/loadgen" -target "127.0.0.1:$p1" "$@" -descriptors "$d1" -duration "$dur" -cpu-pids "$pid1" "${x1[@]}" -json >"$bin/j1" &
  w=$!
  taskset -c 1 "$bin/loadgen" -target "127.0.0.1:$p2" "$@" -descriptors "$d2" -duration "$dur" -cpu-pids "$pid2" "${x2[@]}" -json >"$bin/j2" &
  wait $w $!
}

# pair_ratio BIN: prints the second run's CPU a request over the first's,
# both, and their decided req/s, from BIN/j1 and BIN/j2; fails if either
# run had a failed request or a tier fault.
pair_ratio() {
  python3 - "$1/j1" "$1/j2" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for r in (a, b):
    if r["errors"] or r["unknown"] or r.get("tier_faults"):
        sys.exit("a failed run: %d errors, %d unknown, tier faults %s" % (r["errors"], r["unknown"], r.get("tier_faults")))
print("%.4f %.1f %.1f %d %d" % (b["cpu_us_per_req"][0] / a["cpu_us_per_req"][0], a["cpu_us_per_req"][0], b["cpu_us_per_req"][0], a["decided_rps"], b["decided_rps"]))
PY
}

# orientations SCENARIO NAME LABEL RATIOS...: the result of runs that
# alternate the ports, each RATIO "a" + NAME's CPU a request over the
# other's with NAME on the second port, or "b" + the other's over NAME's
# with the other on the second: the geometric mean of the two
# orientations' medians, which cancels a port's own cost. LABEL names the
# ratio ("this ÷ REV").
orientations() {
  local scenario=$1 name=$2 label=$3
  shift 3
  python3 - "$scenario" "$name" "$label" "$@" <<'PY'
import statistics, sys
scenario, name, label, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
a = [float(x[1:]) for x in runs if x[0] == "a"]
b = [float(x[1:]) for x in runs if x[0] == "b"]
if not a or not b:
    sys.exit("%s: need runs in both orientations (-n 2 at least)" % scenario)
ma, mb = statistics.median(a), statistics.median(b)
print("%s: %s = %.3f (medians %.3f with %s on the second port, %.3f on the first; the second port's own cost %.3f)"
      % (scenario, label, (ma / mb) ** 0.5, ma, name, 1 / mb, (ma * mb) ** 0.5))
PY
}
