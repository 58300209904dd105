package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the Redis figures count, and why (Redis 7.0 measured here):
//
//   - INFO commandstats counts every executed command, including the ones a
//     Lua script runs through redis.call: an EVALSHA whose script calls HGET
//     and HSET adds one to cmdstat_evalsha and one each to cmdstat_hget and
//     cmdstat_hset. total_commands_processed counts the same way (3 there).
//     So neither gives top-level commands alone, and on Redis 7.0 no counter
//     does: per-client tot-cmds (CLIENT LIST, Redis 8 / Valkey 8 only) counts
//     script-internal calls too, and pooled connections come and go.
//   - Script runs are exact: EVAL, EVALSHA, their _RO forms and FCALL cannot
//     be called from inside a script, so their calls are all top-level.
//   - Everything else (Commands − Scripts) is script-internal calls plus any
//     top-level commands that are not scripts (SCRIPT LOAD, PING, HELLO on
//     new connections). For a server that sends only scripts, as sluice's
//     design requires, that is the script-internal work. ByCommand has the
//     breakdown to tell.
//   - Round trips: total_reads_processed counts the server's read events on
//     client sockets. A pipelined batch that arrives together is one read, so
//     reads per request is the closest server-side figure to network round
//     trips per request (1.0 for one command per request, ≪1 when calls are
//     coalesced into pipelines). It undercounts when separate batches of one
//     connection arrive before Redis reads, and overcounts batches over the
//     16 KiB read buffer and connection closes.
//
// The sampler's own traffic is subtracted: one dedicated connection, opened
// before the first sample, sending one INFO per sample. A sample's INFO is
// counted in commandstats only after it has run and its read event before, so
// the delta between two samples holds exactly one INFO command (the first)
// and one read (the second's). Anything else talking to the same Redis shows
// up in the figures: use a Redis of its own for a measurement.

// scriptCommands are the commandstats names of script invocations.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// RedisFigures are the Redis work done during the measured phase.
type RedisFigures struct {
	Addr    string `json:"addr"`
	Version string `json:"version"`
	// Scripts: EVAL/EVALSHA/FCALL (and _RO) calls, all top-level.
	Scripts int64 `json:"scripts"`
	// Commands: total_commands_processed, script-internal calls included.
	Commands int64 `json:"commands"`
	// Reads: total_reads_processed, read events ≈ round trips; -1 when the
	// server does not report it.
	Reads int64 `json:"reads"`
	// FailedCalls and RejectedCalls sum commandstats' failed_calls (errors
	// while running, e.g. a script error) and rejected_calls (refused before
	// running, e.g. NOSCRIPT, OOM, wrong arity).
	FailedCalls   int64 `json:"failed_calls"`
	RejectedCalls int64 `json:"rejected_calls"`
	// CPU: Redis process user+system CPU.
	CPUSeconds float64 `json:"cpu_s"`

	ScriptsPerReq  float64 `json:"scripts_per_req"`
	CommandsPerReq float64 `json:"commands_per_req"`
	// OtherPerReq = (Commands − Scripts)/requests: script-internal calls plus
	// non-script top-level commands.
	OtherPerReq float64 `json:"other_per_req"`
	ReadsPerReq float64 `json:"reads_per_req"` // -1 when Reads is
	CPUPerReqUs float64 `json:"cpu_per_req_us"`
	// ByCommand: calls per command (commandstats name), non-zero only, the
	// sampler's INFO excluded.
	ByCommand map[string]int64 `json:"by_command"`
}

type cmdStat struct {
	calls, failed, rejected int64
}

type redisSample struct {
	version  string
	commands int64
	reads    int64 // -1: not reported
	cpu      float64
	cmds     map[string]cmdStat
}

// redisSampler reads INFO from one Redis over one connection of its own.
type redisSampler struct {
	addr   string
	client *redis.Client
}

func newRedisSampler(addr string) *redisSampler {
	return &redisSampler{addr: addr, client: redis.NewClient(&redis.Options{
		Addr:            addr,
		PoolSize:        1,
		MaxRetries:      -1, // a retried INFO would be counted twice
		DialTimeout:     5 * time.Second,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
		ConnMaxIdleTime: -1, // keep the one connection: a reconnect adds commands
		DisableIdentity: true,
	})}
}

func (s *redisSampler) Close() error { return s.client.Close() }

func (s *redisSampler) sample(ctx context.Context) (redisSample, error) {
	// "all" (one command, every version) includes stats, cpu, server and
	// commandstats; multi-section INFO needs Redis 7.
	text, err := s.client.Info(ctx, "all").Result()
	if err != nil {
		return redisSample{}, fmt.Errorf("redis %s: INFO: %w", s.addr, err)
	}
	return parseRedisInfo(text)
}

func parseRedisInfo(text string) (redisSample, error) {
	rs := redisSample{reads: -1, cmds: map[string]cmdStat{}}
	var haveCommands bool
	var cpuUser, cpuSys float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		var err error
		switch {
		case k == "redis_version":
			rs.version = v
		case k == "total_commands_processed":
			rs.commands, err = strconv.ParseInt(v, 10, 64)
			haveCommands = true
		case k == "total_reads_processed":
			rs.reads, err = strconv.ParseInt(v, 10, 64)
		case k == "used_cpu_user":
			cpuUser, err = strconv.ParseFloat(v, 64)
		case k == "used_cpu_sys":
			cpuSys, err = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			var st cmdStat
			st, err = parseCmdStat(v)
			rs.cmds[strings.TrimPrefix(k, "cmdstat_")] = st
		}
		if err != nil {
			return redisSample{}, fmt.Errorf("redis INFO %s: %q: %w", k, v, err)
		}
	}
	if !haveCommands {
		return redisSample{}, fmt.Errorf("redis INFO has no total_commands_processed")
	}
	rs.cpu = cpuUser + cpuSys
	return rs, nil
}

// parseCmdStat parses "calls=3,usec=7,usec_per_call=2.33,rejected_calls=0,failed_calls=0"
// (rejected_calls and failed_calls exist from Redis 6.2).
func parseCmdStat(v string) (cmdStat, error) {
	var st cmdStat
	for _, field := range strings.Split(v, ",") {
		name, num, _ := strings.Cut(field, "=")
		var dst *int64
		switch name {
		case "calls":
			dst = &st.calls
		case "failed_calls":
			dst = &st.failed
		case "rejected_calls":
			dst = &st.rejected
		default:
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return cmdStat{}, fmt.Errorf("field %s: %w", name, err)
		}
		*dst = n
	}
	return st, nil
}

// redisDelta turns two samples, taken around requests requests, into the
// figures, with the sampler's own INFO and read removed.
func redisDelta(addr string, before, after redisSample, requests uint64) (*RedisFigures, error) {
	f := &RedisFigures{Addr: addr, Version: after.version, ByCommand: map[string]int64{}}
	f.Commands = after.commands - before.commands - 1
	if before.reads >= 0 && after.reads >= 0 {
		f.Reads = after.reads - before.reads - 1
	} else {
		f.Reads = -1
	}
	if f.Commands < 0 || f.Reads < -1 {
		return nil, fmt.Errorf("redis %s: counters went backwards between samples (CONFIG RESETSTAT or a restart during the run?)", addr)
	}
	f.CPUSeconds = after.cpu - before.cpu
	for name, a := range after.cmds {
		b := before.cmds[name]
		d := cmdStat{calls: a.calls - b.calls, failed: a.failed - b.failed, rejected: a.rejected - b.rejected}
		if name == "info" {
			d.calls-- // the first sample's INFO
		}
		if d.calls < 0 || d.failed < 0 || d.rejected < 0 {
			return nil, fmt.Errorf("redis %s: %s counters went backwards between samples (CONFIG RESETSTAT or a restart during the run?)", addr, name)
		}
		if d.calls > 0 {
			f.ByCommand[name] = d.calls
		}
		f.FailedCalls += d.failed
		f.RejectedCalls += d.rejected
	}
	for _, name := range scriptCommands {
		f.Scripts += f.ByCommand[name]
	}
	if requests > 0 {
		n := float64(requests)
		f.ScriptsPerReq = float64(f.Scripts) / n
		f.CommandsPerReq = float64(f.Commands) / n
		f.OtherPerReq = float64(f.Commands-f.Scripts) / n
		f.ReadsPerReq = float64(f.Reads) / n
		if f.Reads < 0 {
			f.ReadsPerReq = -1
		}
		f.CPUPerReqUs = f.CPUSeconds * 1e6 / n
	}
	return f, nil
}
