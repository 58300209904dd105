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
		"log-level", "log-format", "redis-url", "redis-cluster", "redis-sentinel-master", "redis-sentinel-addrs",
		"redis-username", "redis-password", "redis-tls-ca", "key-prefix"} {
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
		"LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.svc:6379", "REDIS_AUTH": "user:pa ss", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/certs/redis-ca.crt",
		"REDIS_POOL_SIZE": "20", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576",
		"SHADOW_MODE": "false", "QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true",
	}
	fs := daemonFlags()
	if err := fs.Parse([]string{"-log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	applied, err := Apply(fs, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"config": "/data/ratelimit/config", "grpc-addr": "0.0.0.0:8081", "http-addr": "0.0.0.0:8080",
		"grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key", "grpc-tls-client-ca": "/certs/ca.crt",
		"log-level": "warn", "log-format": "json",
		"redis-url": "rediss://user:pa%20ss@redis.svc:6379", "redis-tls-ca": "/certs/redis-ca.crt", "redis-pool-size": "20",
		"cache-size": "8192", "shadow-mode": "false", "quota-mode": "true", "response-dynamic-metadata": "true",
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
	if _, err := Apply(fs, func(k string) string { return env[k] }); err != nil {
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
	}
	for _, c := range cases {
		fs := daemonFlags()
		if _, err := Apply(fs, func(k string) string { return c.env[k] }); err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if got := values(fs); !maps.Equal(got, c.want) {
			t.Errorf("%v: flags %v; want %v", c.env, got, c.want)
		}
	}
}

// TestApplyRefuses what sluice cannot honour, naming the variable.
func TestApplyRefuses(t *testing.T) {
	for _, env := range []map[string]string{
		{"BACKEND_TYPE": "memcache"},
		{"CONFIG_TYPE": "XDS_DELTA"},
		{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "s1:26379"},
		{"REDIS_TYPE": "ring", "REDIS_URL": "a:1"},
		{"SHADOW_MODE": "sometimes"},
		{"LOCAL_CACHE_SIZE_IN_BYTES": "lots"},
	} {
		_, err := Apply(daemonFlags(), func(k string) string { return env[k] })
		var name string
		for k := range env {
			if name == "" || k == "SHADOW_MODE" || k == "LOCAL_CACHE_SIZE_IN_BYTES" || k == "REDIS_TYPE" || k == "CONFIG_TYPE" || k == "BACKEND_TYPE" {
				name = k
			}
		}
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: %v; want an error naming %s", env, err, name)
		}
	}
}

// TestSettingsTable: every variable Apply reads is in Settings, and every
// setting is in the README's table of them.
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
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range listed {
		if !strings.Contains(string(readme), "| `"+v+"` |") {
			t.Errorf("README.md's table of the reference's settings lacks %s", v)
		}
	}
}
