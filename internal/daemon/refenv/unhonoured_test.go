package refenv

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestUnhonoured: a reference variable that is set and that the daemon
// does not honour is returned to be logged (it changes how sluice runs)
// or stops start-up (it concerns TLS, client names or authentication),
// named without its value; a value with which the reference does what
// sluice does anyway is neither.
func TestUnhonoured(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		ignored []string // want returned, in this order
		refused []string // want named in the error
	}{
		{"inert values", map[string]string{"USE_STATSD": "false", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "FALSE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "1", "PROMETHEUS_PATH": "/metrics"}, nil, nil},
		{"warned", map[string]string{"PROMETHEUS_ADDR": ":19001", "USE_STATSD": "true", "TRACING_ENABLED": "true", "REDIS_PERSECOND_AUTH": "S3cret",
			"GRPC_MAX_CONNECTION_AGE": "1h"}, []string{"GRPC_MAX_CONNECTION_AGE", "REDIS_PERSECOND_AUTH", "USE_STATSD", "PROMETHEUS_ADDR", "TRACING_ENABLED"}, nil},
		{"refused", map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "GRPC_UDS": "/run/rl.sock",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization=Bearer S3cret"}, nil,
			[]string{"GRPC_UDS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ignored, err := Apply(daemonFlags(), func(k string) string { return tt.env[k] })
			var got []string
			for _, i := range ignored {
				got = append(got, i.Var)
				if i.Note == "" {
					t.Errorf("%s ignored with no reason", i.Var)
				}
			}
			if !slices.Equal(got, tt.ignored) {
				t.Errorf("ignored %v; want %v", got, tt.ignored)
			}
			for _, v := range tt.refused {
				if err == nil || !strings.Contains(err.Error(), v) {
					t.Errorf("Apply: %v; want an error naming %s", err, v)
				}
			}
			if tt.refused == nil && err != nil {
				t.Errorf("Apply: %v; want no error", err)
			}
			if err != nil && strings.Contains(err.Error(), "S3cret") {
				t.Errorf("the error shows a value: %v", err)
			}
		})
	}
}

// TestUnhonouredByTheDaemon: a variable whose flags the daemon lacks is
// not honoured. GRPC_CLIENT_TLS_SAN on a daemon without
// -grpc-tls-client-san stops start-up (the finding: it was silently
// ignored, and a certificate of another name served); a Redis setting on
// a daemon without Redis (the sidecar) only warns, whatever it is.
func TestUnhonouredByTheDaemon(t *testing.T) {
	without := func(names ...string) *flag.FlagSet {
		fs := flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		daemonFlags().VisitAll(func(f *flag.Flag) {
			if !slices.Contains(names, f.Name) {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
		return fs
	}
	tlsEnv := map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k",
		"GRPC_CLIENT_TLS_CACERT": "/ca", "GRPC_CLIENT_TLS_SAN": "sidecar-a"}
	if _, _, err := Apply(without("grpc-tls-client-san"), func(k string) string { return tlsEnv[k] }); err == nil || !strings.Contains(err.Error(), "GRPC_CLIENT_TLS_SAN") {
		t.Errorf("GRPC_CLIENT_TLS_SAN on a daemon that cannot check it: %v; want start-up refused", err)
	}
	// Credentials in a sentinel's URL are for -redis-sentinel-password.
	urlEnv := map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,redis://:S3cret@s1:26379"}
	if _, _, err := Apply(without("redis-sentinel-username", "redis-sentinel-password"), func(k string) string { return urlEnv[k] }); err == nil ||
		!strings.Contains(err.Error(), "-redis-sentinel-password") || strings.Contains(err.Error(), "S3cret") {
		t.Errorf("a sentinel URL's password on a server that cannot use it: %v; want start-up refused, without the password", err)
	}
	certEnv := map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c", "REDIS_TLS_CLIENT_KEY": "/k"}
	if _, _, err := Apply(without("redis-tls-cert", "redis-tls-key"), func(k string) string { return certEnv[k] }); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CLIENT_CERT") {
		t.Errorf("REDIS_TLS_CLIENT_CERT on a server that cannot present it: %v; want start-up refused", err)
	}

	sidecar := flag.NewFlagSet("localfilter", flag.ContinueOnError)
	for _, name := range []string{"config", "grpc-addr", "http-addr", "grpc-tls-cert", "grpc-tls-key", "grpc-tls-client-ca", "grpc-tls-client-san", "log-level"} {
		sidecar.String(name, "", "")
	}
	redisEnv := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_AUTH": "S3cret", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c",
		"REDIS_TLS_CLIENT_KEY": "/k", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "LOG_LEVEL": "info"}
	_, ignored, err := Apply(sidecar, func(k string) string { return redisEnv[k] })
	if err != nil {
		t.Fatalf("Redis settings on a daemon without Redis: %v; want warnings only", err)
	}
	var got []string
	for _, i := range ignored {
		got = append(got, i.Var)
	}
	want := []string{"REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}
	if !slices.Equal(got, want) {
		t.Errorf("ignored %v; want %v", got, want)
	}
}

// TestEveryReferenceVariable: each of the reference's variables is in
// Settings once, by name or in a group (NAME_*).
func TestEveryReferenceVariable(t *testing.T) {
	for _, v := range referenceVars() {
		var in []string
		for _, s := range Settings() {
			if slices.Contains(s.vars(), v) {
				in = append(in, s.Var)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s is in Settings %v; want once", v, in)
		}
	}
	for _, s := range Settings() {
		if len(s.vars()) == 0 {
			t.Errorf("Settings lists %s, which is none of the reference's variables", s.Var)
		}
	}
}
