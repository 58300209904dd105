package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// LoopbackAddr checks that addr (host:port) resolves only to loopback
// addresses (127.0.0.0/8 or ::1) and returns the first of them as ip:port, so
// that what is dialled is exactly what was checked. This machine's policy
// forbids load on any other address. With allowRemote the address is returned
// unchanged and not resolved.
//
// An empty host (":8081") is refused: it is the listen form, not a target.
func LoopbackAddr(ctx context.Context, addr string, allowRemote bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: want host:port: %w", addr, err)
	}
	if allowRemote {
		return addr, nil
	}
	if host == "" {
		return "", fmt.Errorf("address %q: name a loopback host, e.g. 127.0.0.1%s", addr, addr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return "", fmt.Errorf("address %q: resolve %s: %w (load is only allowed on loopback addresses)", addr, host, err)
		}
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("address %q: %s resolves to nothing", addr, host)
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return "", fmt.Errorf("address %q: %s is not a loopback address (127.0.0.0/8 or ::1); load on other addresses is refused unless remote load is explicitly allowed", addr, ip)
		}
	}
	return net.JoinHostPort(ips[0].Unmap().WithZone("").String(), port), nil
}
