// Package refenv reads envoyproxy/ratelimit's environment settings (the
// reference's) for the flags a sluice daemon was given no value for, so
// that a container spec written for the reference — Envoy Gateway's, say —
// runs sluice unchanged. Settings lists every reference variable with what
// it becomes: a flag it sets, or why it has no meaning in sluice (the
// README's table is checked against it).
package refenv

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Setting is one of the reference's environment variables.
//
// A plain value, safe to share between goroutines.
type Setting struct {
	Var string
	// Flags are the sluice flags it sets, none when it does not apply.
	Flags []string
	// Note says how it maps, or why it does not apply.
	Note string
}

// Applied is one flag set from the reference's environment.
//
// A plain value, safe to share between goroutines.
type Applied struct {
	Flag, Value string
	From        []string // the variables it came from
}

// mapping computes flag values from the reference's variables: nil when
// they say nothing (unset), an error for a value sluice cannot honour.
type mapping struct {
	vars []string
	set  func(get func(string) string) (map[string]string, error)
}

// Apply sets each flag of fs that is not set yet (the daemon's own flags
// and SLUICE_ variables win) from the reference's variables, read with
// getenv, and returns what it set, in a fixed order.
func Apply(fs *flag.FlagSet, getenv func(string) string) ([]Applied, error) {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var out []Applied
	var errs []error
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
			if given[name] || fs.Lookup(name) == nil {
				continue
			}
			if err := fs.Set(name, values[name]); err != nil {
				errs = append(errs, fmt.Errorf("%s: -%s %q: %w", strings.Join(from, ", "), name, values[name], err))
				continue
			}
			out = append(out, Applied{Flag: name, Value: values[name], From: from})
		}
	}
	return out, errors.Join(errs...)
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
		copyVar("LOG_LEVEL", "log-level", func(s string) (string, error) { return strings.ToLower(s), nil }),
		copyVar("LOG_FORMAT", "log-format", func(s string) (string, error) { return strings.ToLower(s), nil }),
		{vars: []string{"BACKEND_TYPE", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CACERT"}, set: redis},
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

// redis maps the reference's Redis settings: REDIS_TYPE SINGLE (a URL),
// CLUSTER (comma-separated seeds) or SENTINEL ("master,addr,addr...");
// REDIS_SOCKET_TYPE tcp or unix; REDIS_AUTH "password" or "user:password".
func redis(get func(string) string) (map[string]string, error) {
	if b := strings.ToLower(get("BACKEND_TYPE")); b != "" && b != "redis" {
		return nil, fmt.Errorf("BACKEND_TYPE=%q: sluice counts in Redis or in memory, not in %s", get("BACKEND_TYPE"), b)
	}
	addr := get("REDIS_URL")
	if addr == "" {
		return nil, nil
	}
	var tlsOn bool
	if v := get("REDIS_TLS"); v != "" {
		var err error
		if tlsOn, err = truthy(v); err != nil {
			return nil, fmt.Errorf("REDIS_TLS=%q: %w", v, err)
		}
	}
	user, password := "", get("REDIS_AUTH")
	if u, p, ok := strings.Cut(password, ":"); ok {
		user, password = u, p
	}
	out := map[string]string{}
	if ca := get("REDIS_TLS_CACERT"); ca != "" {
		out["redis-tls-ca"] = ca
	}
	switch t := strings.ToUpper(get("REDIS_TYPE")); t {
	case "", "SINGLE":
		u := url.URL{Scheme: "redis", Host: addr}
		switch {
		case strings.ToLower(get("REDIS_SOCKET_TYPE")) == "unix" || strings.HasPrefix(addr, "/"):
			u = url.URL{Scheme: "unix", Path: addr}
		case tlsOn:
			u.Scheme = "rediss"
		}
		if password != "" {
			u.User = url.UserPassword(user, password)
		}
		out["redis-url"] = u.String()
	case "CLUSTER":
		out["redis-cluster"] = addr
	case "SENTINEL":
		master, addrs, ok := strings.Cut(addr, ",")
		if !ok {
			return nil, fmt.Errorf("REDIS_URL=%q with REDIS_TYPE=SENTINEL: want the master's name, then the sentinels' addresses, comma-separated", addr)
		}
		out["redis-sentinel-master"], out["redis-sentinel-addrs"] = master, addrs
	default:
		return nil, fmt.Errorf("REDIS_TYPE=%q: want SINGLE, CLUSTER or SENTINEL", t)
	}
	if t := strings.ToUpper(get("REDIS_TYPE")); t == "CLUSTER" || t == "SENTINEL" {
		if password != "" {
			out["redis-username"], out["redis-password"] = user, password
		}
		if tlsOn {
			out["redis-tls"] = "true"
		}
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
	keys := n / 128
	if n > 0 {
		keys = max(keys, 1)
	}
	return strconv.FormatInt(keys, 10), nil
}
