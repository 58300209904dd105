package serve

import (
	"flag"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/daemon/xdsconfig"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/reload"
	"github.com/sluicehq/sluice/pkg/server"
)

// XDSFlags are the flags of the xDS config source (internal/daemon/xdsconfig),
// in place of -config, as Envoy Gateway serves configs to the reference.
type XDSFlags struct {
	Server, NodeID            string
	CA, Cert, Key, ServerName string
}

// Register adds the flags to fs.
func (x *XDSFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&x.Server, "config-xds-server", "", "read the descriptor config over xDS (RateLimitConfig resources, state of the world) from this server, host:port, in place of -config")
	fs.StringVar(&x.NodeID, "config-xds-node-id", "default", "the node id sluice gives the xDS server")
	fs.StringVar(&x.CA, "config-xds-tls-ca", "", "TLS to the xDS server, verified against these PEM CAs (implied by any -config-xds-tls-* flag; default: the system's roots)")
	fs.StringVar(&x.Cert, "config-xds-tls-cert", "", "PEM client certificate presented to the xDS server (mTLS; with -config-xds-tls-key)")
	fs.StringVar(&x.Key, "config-xds-tls-key", "", "PEM private key of -config-xds-tls-cert")
	fs.StringVar(&x.ServerName, "config-xds-tls-server-name", "", "name the xDS server's certificate must carry (default: the host of -config-xds-server)")
}

// Source is the xDS config source the flags ask for, and its name; nil
// when they ask for none.
func (x *XDSFlags) Source(log *slog.Logger, sizes config.SizeBounds) (reload.Source, string, error) {
	if x.Server == "" {
		return nil, "", nil
	}
	o := xdsconfig.Options{Server: x.Server, NodeID: x.NodeID, Logger: log, Sizes: sizes}
	if x.CA != "" || x.Cert != "" || x.Key != "" || x.ServerName != "" {
		name := x.ServerName
		if name == "" {
			name = HostOf(x.Server)
		}
		tc, err := ClientTLS("-config-xds-tls", x.CA, x.Cert, x.Key, name)
		if err != nil {
			return nil, "", err
		}
		o.TLS = tc
	}
	src, err := xdsconfig.New(o)
	if err != nil {
		return nil, "", fmt.Errorf("-config-xds-server: %w", err)
	}
	return src, src.Name(), nil
}

// HostOf is the host of a host:port address (the address itself when it
// has no port).
func HostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// ServerOptions are the server.Options both daemons take from these
// flags: the config source and the answer's settings.
func (f *Flags) ServerOptions(log *slog.Logger, reg prometheus.Registerer) (server.Options, error) {
	sizes := config.SizeBounds{MaxFileBytes: f.ConfigMaxFileBytes, MaxTotalBytes: f.ConfigMaxTotalBytes}
	src, name, err := f.XDS.Source(log, sizes)
	if err != nil {
		return server.Options{}, err
	}
	return server.Options{
		Config: f.Config, ConfigSource: src, ConfigSourceName: name, ConfigSizes: sizes,
		CacheSize: f.ServiceCacheSize(), TopKeysBytes: f.TopKeysBytes, KeyPrefix: f.KeyPrefix, LegacyHeaders: f.LegacyHeaders,
		DynamicMetadata: f.DynamicMetadata, ShadowAll: f.ShadowAll, QuotaAll: f.QuotaAll, ReferenceMetrics: f.ReferenceMetrics,
		ReferenceCounting: f.ReferenceCounting,
		Logger:            log, Registerer: reg,
	}, nil
}
