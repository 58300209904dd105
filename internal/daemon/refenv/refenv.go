// Package refenv reads envoyproxy/ratelimit's environment settings (the
// reference's) for the flags a sluice daemon was given no value for, so
// that a container spec written for the reference — Envoy Gateway's, say —
// runs sluice unchanged. Settings lists every reference variable with what
// it becomes: a flag it sets, or why it has no meaning in sluice, and what
// a daemon does when it is set and not honoured: warn, or refuse to start
// when ignoring it would weaken TLS, a check of client names or
// authentication (the README's table is checked against it).
//
// No error or note it returns shows a credential: a refused value is
// quoted only where it cannot hold one, REDIS_URL is shown redacted
// (flagenv.Redacted), REDIS_AUTH and REDIS_SENTINEL_AUTH never.
package refenv

import (
	"github.com/sluicehq/sluice/pkg/cache"

	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
)

// Applied is one flag set from the reference's environment.
//
// A plain value, safe to share between goroutines.
type Applied struct {
	Flag, Value string
	From        []string // the variables it came from
}

// Ignored is a variable that is set and that the daemon does not honour,
// with why: the daemon logs it once at start.
//
// A plain value, safe to share between goroutines.
type Ignored struct{ Var, Note string }

// mapping computes flag values from the reference's variables: nil when
// they say nothing (unset), an error for a value sluice cannot honour.
type mapping struct {
	vars []string
	set  func(get func(string) string) (map[string]string, error)
}

// Apply sets each flag of fs that is not set yet (the daemon's own flags
// and SLUICE_ variables win) from the reference's variables, read with
// getenv, and returns what it set, in a fixed order, and the variables
// that are set but not honoured and only warn. Those that must not be
// ignored, and values sluice cannot honour, are the error.
func Apply(fs *flag.FlagSet, getenv func(string) string) ([]Applied, []Ignored, error) {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var out []Applied
	var errs []error
	part := partOf()
	for _, m := range mappings() {
		values, err := m.set(getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var from []string
		for _, v := range m.vars {
			if getenv(v) != "" {
				from = append(from, v)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(values)) {
			if given[name] {
				continue
			}
			if fs.Lookup(name) == nil {
				// A daemon without the variables' part (Redis, in the
				// sidecar) warns of them (unhonoured); one with it stops
				// rather than drop a value, which may be a credential.
				if len(from) == 0 || part[from[0]] == "" || fs.Lookup(part[from[0]]) != nil {
					errs = append(errs, fmt.Errorf("%s: sluice %s takes no -%s, which they set, so it does not start", strings.Join(from, ", "), fs.Name(), name))
				}
				continue
			}
			if err := fs.Set(name, values[name]); err != nil {
				errs = append(errs, flagenv.SetError(strings.Join(from, ", ")+": -"+name, values[name], err))
				continue
			}
			out = append(out, Applied{Flag: name, Value: values[name], From: from})
		}
	}
	ignored, err := unhonoured(fs, getenv)
	return out, ignored, errors.Join(append(errs, err)...)
}

// unhonoured checks each variable that is set against what fs honours:
// one whose flags the daemon takes is honoured (the mappings set them, or
// leave them as the reference leaves its setting, its switch being off);
// one set to a value in Same needs nothing; any other is not honoured,
// and warns or refuses as its Setting says (a Redis setting on a daemon
// without Redis only warns).
func unhonoured(fs *flag.FlagSet, getenv func(string) string) ([]Ignored, error) {
	var out []Ignored
	var errs []error
	for _, s := range Settings() {
		for _, v := range s.vars() {
			value := getenv(v)
			if value == "" || s.same(value) || (len(s.Flags) > 0 && takesAll(fs, s.Flags)) {
				continue
			}
			note, policy := s.Note, s.Unhonoured
			if s.Part != "" && fs.Lookup(s.Part) == nil {
				note, policy = fmt.Sprintf("sluice %s takes no -%s", fs.Name(), s.Part), Warn
			} else if len(s.Flags) > 0 {
				note = fmt.Sprintf("sluice %s takes no %s", fs.Name(), flagList(s.Flags))
			}
			if policy == Refuse {
				errs = append(errs, fmt.Errorf("%s is set and sluice %s does not honour it (%s): ignoring it could weaken TLS, a check of client names, authentication or who may connect, so sluice does not start; unset it to go on without it", v, fs.Name(), note))
				continue
			}
			out = append(out, Ignored{Var: v, Note: note})
		}
	}
	return out, errors.Join(errs...)
}

// partOf maps each variable to its Setting's Part.
func partOf() map[string]string {
	out := map[string]string{}
	for _, s := range Settings() {
		for _, v := range s.vars() {
			out[v] = s.Part
		}
	}
	return out
}

func takesAll(fs *flag.FlagSet, names []string) bool {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			return false
		}
	}
	return true
}

func flagList(names []string) string {
	var out []string
	for _, n := range names {
		out = append(out, "-"+n)
	}
	return strings.Join(out, ", ")
}

// hostPort joins the reference's host and port variables, with its
// defaults for the one not set; nil when neither is.
func hostPort(hostVar, portVar, defHost, defPort, flagName string) mapping {
	return mapping{vars: []string{hostVar, portVar}, set: func(get func(string) string) (map[string]string, error) {
		host, port := get(hostVar), get(portVar)
		if host == "" && port == "" {
			return nil, nil
		}
		if host == "" {
			host = defHost
		}
		if port == "" {
			port = defPort
		}
		return map[string]string{flagName: net.JoinHostPort(host, port)}, nil
	}}
}

// copyVar sets flagName to the variable's value, through conv.
func copyVar(v, flagName string, conv func(string) (string, error)) mapping {
	return mapping{vars: []string{v}, set: func(get func(string) string) (map[string]string, error) {
		s := get(v)
		if s == "" {
			return nil, nil
		}
		if conv != nil {
			var err error
			if s, err = conv(s); err != nil {
				return nil, fmt.Errorf("%s=%q: %w", v, get(v), err)
			}
		}
		return map[string]string{flagName: s}, nil
	}}
}

func truthy(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("not a boolean")
	}
	return b, nil
}

func boolVar(v, flagName string) mapping {
	return copyVar(v, flagName, func(s string) (string, error) {
		b, err := truthy(s)
		return strconv.FormatBool(b), err
	})
}

func mappings() []mapping {
	return []mapping{
		{vars: []string{"CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}, set: configSource},
		hostPort("GRPC_HOST", "GRPC_PORT", "0.0.0.0", "8081", "grpc-addr"),
		hostPort("HOST", "PORT", "0.0.0.0", "8080", "http-addr"),
		{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT"}, set: grpcTLS},
		// Checked at the handshake; without a client CA -grpc-tls-client-san
		// stops start-up (serve.GRPCTLS), where the reference ignores it.
		copyVar("GRPC_CLIENT_TLS_SAN", "grpc-tls-client-san", nil),
		copyVar("LOG_LEVEL", "log-level", func(s string) (string, error) { return strings.ToLower(s), nil }),
		copyVar("LOG_FORMAT", "log-format", func(s string) (string, error) { return strings.ToLower(s), nil }),
		{vars: redisVars, set: redis},
		copyVar("REDIS_POOL_SIZE", "redis-pool-size", nil),
		copyVar("LOCAL_CACHE_SIZE_IN_BYTES", "cache-size", cacheKeys),
		copyVar("CACHE_KEY_PREFIX", "key-prefix", nil),
		boolVar("SHADOW_MODE", "shadow-mode"),
		boolVar("QUOTA_MODE", "quota-mode"),
		boolVar("RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata"),
		boolVar("LIMIT_RESPONSE_HEADERS_ENABLED", "legacy-headers"),
		boolVar("USE_PROMETHEUS", "reference-metrics"),
	}
}

// configSource: the reference reads its config files from
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY ("config"), or
// with CONFIG_TYPE=GRPC_XDS_SOTW from an xDS server.
func configSource(get func(string) string) (map[string]string, error) {
	switch t := strings.ToUpper(get("CONFIG_TYPE")); t {
	case "", "FILE":
	case "GRPC_XDS_SOTW":
		return xdsSource(get)
	default:
		return nil, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t)
	}
	root := get("RUNTIME_ROOT")
	if root == "" {
		return nil, nil
	}
	app := get("RUNTIME_APPDIRECTORY")
	if app == "" {
		app = "config"
	}
	return map[string]string{"config": filepath.Join(root, get("RUNTIME_SUBDIRECTORY"), app)}, nil
}

// xdsSource maps the reference's xDS client settings, with its defaults.
func xdsSource(get func(string) string) (map[string]string, error) {
	out := map[string]string{"config-xds-server": "localhost:18000", "config-xds-node-id": "default"}
	if v := get("CONFIG_GRPC_XDS_SERVER_URL"); v != "" {
		out["config-xds-server"] = v
	}
	if v := get("CONFIG_GRPC_XDS_NODE_ID"); v != "" {
		out["config-xds-node-id"] = v
	}
	if v := get("CONFIG_GRPC_XDS_SERVER_USE_TLS"); v != "" {
		on, err := truthy(v)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_USE_TLS=%q: %w", v, err)
		}
		if on {
			for flagName, v := range map[string]string{
				"config-xds-tls-ca": "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "config-xds-tls-cert": "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
				"config-xds-tls-key": "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "config-xds-tls-server-name": "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
			} {
				if x := get(v); x != "" {
					out[flagName] = x
				}
			}
		}
	}
	return out, nil
}

func grpcTLS(get func(string) string) (map[string]string, error) {
	use := get("GRPC_SERVER_USE_TLS")
	if use == "" {
		return nil, nil
	}
	on, err := truthy(use)
	if err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_USE_TLS=%q: %w", use, err)
	}
	if !on {
		return nil, nil
	}
	out := map[string]string{"grpc-tls-cert": get("GRPC_SERVER_TLS_CERT"), "grpc-tls-key": get("GRPC_SERVER_TLS_KEY")}
	if ca := get("GRPC_CLIENT_TLS_CACERT"); ca != "" {
		out["grpc-tls-client-ca"] = ca
	}
	return out, nil
}

// cacheKeys turns the reference's over-limit cache size in bytes into
// sluice's flag cache size in keys: about 128 bytes a key (0 is off in
// both).
func cacheKeys(s string) (string, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return "", errors.New("not a size in bytes")
	}
	keys := n / (cache.KeyOverhead + 48) // a default key's 41 bytes take 48 on the heap
	if n > 0 {
		keys = max(keys, 1)
	}
	return strconv.FormatInt(keys, 10), nil
}
