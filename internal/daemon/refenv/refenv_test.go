package refenv

import (
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// daemonFlags registers the flags refenv may set, as the daemons name them.
func daemonFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, name := range []string{"config", "config-xds-server", "config-xds-node-id", "config-xds-tls-ca", "config-xds-tls-cert",
		"config-xds-tls-key", "config-xds-tls-server-name", "grpc-addr", "http-addr", "grpc-tls-cert", "grpc-tls-key", "grpc-tls-client-ca",
		"grpc-tls-client-san", "log-level", "log-format", "redis-url", "redis-cluster", "redis-sentinel-master", "redis-sentinel-addrs",
		"redis-username", "redis-password", "redis-sentinel-username", "redis-sentinel-password", "redis-tls-ca", "redis-tls-cert", "redis-tls-key",
		"key-prefix"} {
		fs.String(name, "", "")
	}
	for _, name := range []string{"redis-pool-size", "cache-size"} {
		fs.Int(name, 7, "")
	}
	for _, name := range []string{"redis-tls", "shadow-mode", "quota-mode", "response-dynamic-metadata", "legacy-headers"} {
		fs.Bool(name, false, "")
	}
	return fs
}

func values(fs *flag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

// TestApply: the reference's variables as a deployment of it sets them
// become sluice's flags; a flag the daemon was given wins.
func TestApply(t *testing.T) {
	env := map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit",
		"GRPC_PORT": "8081", "PORT": "8080",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt",
		"GRPC_CLIENT_TLS_SAN": "sidecar-a",
		"LOG_LEVEL":           "DEBUG", "LOG_FORMAT": "json",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.svc:6379", "REDIS_AUTH": "user:pa ss", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/certs/redis-ca.crt",
		"REDIS_TLS_CLIENT_CERT": "/certs/redis-client.crt", "REDIS_TLS_CLIENT_KEY": "/certs/redis-client.key", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "false",
		"REDIS_POOL_SIZE": "20", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576",
		"SHADOW_MODE": "false", "QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true",
	}
	fs := daemonFlags()
	if err := fs.Parse([]string{"-log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	applied, ignored, err := Apply(fs, func(k string) string { return env[k] })
	if err != nil || len(ignored) > 0 {
		t.Fatalf("Apply: %v, ignoring %v; want every variable honoured", err, ignored)
	}
	want := map[string]string{
		"config": "/data/ratelimit/config", "grpc-addr": "0.0.0.0:8081", "http-addr": "0.0.0.0:8080",
		"grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key", "grpc-tls-client-ca": "/certs/ca.crt", "grpc-tls-client-san": "sidecar-a",
		"log-level": "warn", "log-format": "json",
		"redis-url": "rediss://user:pa%20ss@redis.svc:6379", "redis-tls-ca": "/certs/redis-ca.crt", "redis-pool-size": "20",
		"redis-tls-cert": "/certs/redis-client.crt", "redis-tls-key": "/certs/redis-client.key",
		"cache-size": "5957", "shadow-mode": "false", "quota-mode": "true", "response-dynamic-metadata": "true",
	}
	if got := values(fs); !maps.Equal(got, want) {
		t.Errorf("flags\n got %v\nwant %v", got, want)
	}
	for _, a := range applied {
		if a.Flag == "log-level" {
			t.Error("LOG_LEVEL replaced the flag given on the command line")
		}
		if len(a.From) == 0 {
			t.Errorf("-%s applied from no variable", a.Flag)
		}
	}
}

// TestApplyXDS: Envoy Gateway's settings for the reference's config over
// xDS with mTLS.
func TestApplyXDS(t *testing.T) {
	env := map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
		"RUNTIME_ROOT": "/data", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	}
	fs := daemonFlags()
	if _, _, err := Apply(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"config-xds-server": "envoy-gateway:18001", "config-xds-node-id": "envoy-ratelimit",
		"config-xds-tls-ca": "/certs/ca.crt", "config-xds-tls-cert": "/certs/tls.crt", "config-xds-tls-key": "/certs/tls.key",
	}
	if got := values(fs); !maps.Equal(got, want) {
		t.Errorf("flags\n got %v\nwant %v", got, want)
	}
}

func TestApplyRedisKinds(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want map[string]string
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/redis.sock"}, map[string]string{"redis-url": "unix:///var/run/redis.sock"}},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:1,b:2", "REDIS_AUTH": "secret", "REDIS_TLS": "true"},
			map[string]string{"redis-cluster": "a:1,b:2", "redis-username": "", "redis-password": "secret", "redis-tls": "true"}},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"},
			map[string]string{"redis-sentinel-master": "mymaster", "redis-sentinel-addrs": "s1:26379,s2:26379"}},
		// REDIS_SENTINEL_AUTH: the sentinels' own credentials, as REDIS_AUTH's.
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379", "REDIS_AUTH": "app:pw", "REDIS_SENTINEL_AUTH": "spw"},
			map[string]string{"redis-sentinel-master": "mymaster", "redis-sentinel-addrs": "s1:26379", "redis-username": "app", "redis-password": "pw",
				"redis-sentinel-username": "", "redis-sentinel-password": "spw"}},
		// The reference's Redis client (radix) reads redis:// URLs in
		// REDIS_URL, REDIS_AUTH winning over the URL's credentials.
		{map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "REDIS_AUTH": "admin:S3cret"}, map[string]string{"redis-url": "redis://admin:S3cret@127.0.0.1:6379"}},
		{map[string]string{"REDIS_URL": "redis://app:pw@10.0.0.1:6379/2", "REDIS_TLS": "true"}, map[string]string{"redis-url": "rediss://app:pw@10.0.0.1:6379/2"}},
		{map[string]string{"REDIS_URL": "redis://10.0.0.1:6379?username=app&password=pw&db=3"}, map[string]string{"redis-url": "redis://app:pw@10.0.0.1:6379/3"}},
		{map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "redis://a:1,redis://b:2"}, map[string]string{"redis-cluster": "a:1,b:2"}},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,redis://:spw@s1:26379,s2:26379"},
			map[string]string{"redis-sentinel-master": "mymaster", "redis-sentinel-addrs": "s1:26379,s2:26379", "redis-sentinel-username": "", "redis-sentinel-password": "spw"}},
		// TLS files count only with REDIS_TLS, as in the reference.
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TLS_CACERT": "/ca", "REDIS_TLS_CLIENT_CERT": "/c", "REDIS_TLS_CLIENT_KEY": "/k"}, map[string]string{"redis-url": "redis://r:1"}},
	}
	for _, c := range cases {
		fs := daemonFlags()
		if _, ignored, err := Apply(fs, func(k string) string { return c.env[k] }); err != nil || len(ignored) > 0 {
			t.Fatalf("%v: %v, ignoring %v", c.env, err, ignored)
		}
		if got := values(fs); !maps.Equal(got, c.want) {
			t.Errorf("%v: flags %v; want %v", c.env, got, c.want)
		}
	}
}

// TestApplyRefuses what sluice cannot honour, naming the variable and
// never a password.
func TestApplyRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"BACKEND_TYPE", map[string]string{"BACKEND_TYPE": "memcache"}},
		{"CONFIG_TYPE", map[string]string{"CONFIG_TYPE": "XDS_DELTA"}},
		{"REDIS_URL", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "s1:26379"}},
		{"REDIS_URL", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "redis://app:S3cret@s1:26379"}},
		{"REDIS_URL", map[string]string{"REDIS_URL": "redis://app:Xq7Vb/S3cret@127.0.0.1:6379"}}, // does not parse
		{"REDIS_URL", map[string]string{"REDIS_URL": "rediss://app:S3cret@127.0.0.1:6379"}},      // the reference reads redis:// only
		{"REDIS_URL", map[string]string{"REDIS_URL": "redis://127.0.0.1:6379/x", "REDIS_AUTH": "S3cret"}},
		{"REDIS_URL", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "redis://a:1/2"}},
		{"REDIS_TYPE", map[string]string{"REDIS_TYPE": "ring", "REDIS_URL": "a:1"}},
		{"REDIS_TLS_CLIENT_KEY", map[string]string{"REDIS_URL": "a:1", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c"}},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "sometimes"}},
		{"LOCAL_CACHE_SIZE_IN_BYTES", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "lots"}},
	} {
		_, _, err := Apply(daemonFlags(), func(k string) string { return tt.env[k] })
		if err == nil || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%v: %v; want an error naming %s", tt.env, err, tt.name)
		} else if strings.Contains(err.Error(), "S3cret") {
			t.Errorf("%v: the error shows the password: %v", tt.env, err)
		}
	}
}

// TestSettingsTable: every variable Apply reads is in Settings, and the
// README's table of them is Settings, row for row.
func TestSettingsTable(t *testing.T) {
	var listed []string
	for _, s := range Settings() {
		listed = append(listed, s.Var)
	}
	for _, m := range mappings() {
		for _, v := range m.vars {
			if !slices.Contains(listed, v) {
				t.Errorf("%s is read but not in Settings", v)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		if v, ok := strings.CutPrefix(line, "| `"); ok {
			if name, _, ok := strings.Cut(v, "` |"); ok {
				rows[name] = line
			}
		}
	}
	for _, s := range Settings() {
		if got, want := rows[s.Var], s.Row(); got != want {
			t.Errorf("README.md's table of the reference's settings, %s:\n got %s\nwant %s", s.Var, got, want)
		}
	}
}
