package refenv

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/daemon/flagenv"
)

// redisVars are the variables the redis mapping reads.
var redisVars = []string{"BACKEND_TYPE", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CACERT",
	"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_SENTINEL_AUTH"}

// redis maps the reference's Redis settings: REDIS_TYPE SINGLE (an
// address), CLUSTER (comma-separated seeds) or SENTINEL ("master,addr,
// addr..."); REDIS_SOCKET_TYPE tcp or unix; REDIS_AUTH and
// REDIS_SENTINEL_AUTH "password" or "user:password". As the reference's
// client (radix) does, an address may be a redis:// URL, whose
// credentials and database count where REDIS_AUTH (REDIS_SENTINEL_AUTH
// for the sentinels) gives none. The TLS files count only with
// REDIS_TLS, as there.
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
	out := map[string]string{}
	if tlsOn {
		if ca := get("REDIS_TLS_CACERT"); ca != "" {
			out["redis-tls-ca"] = ca
		}
		cert, key := get("REDIS_TLS_CLIENT_CERT"), get("REDIS_TLS_CLIENT_KEY")
		if (cert == "") != (key == "") {
			// The reference presents no certificate then, silently.
			return nil, errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together")
		}
		if cert != "" {
			out["redis-tls-cert"], out["redis-tls-key"] = cert, key
		}
	}
	auth := credentials(get("REDIS_AUTH"))
	switch t := strings.ToUpper(get("REDIS_TYPE")); t {
	case "", "SINGLE":
		if strings.ToLower(get("REDIS_SOCKET_TYPE")) == "unix" || strings.HasPrefix(addr, "/") {
			out["redis-url"] = (&url.URL{Scheme: "unix", Path: addr}).String()
			break
		}
		a, err := redisAddr(addr)
		if err != nil {
			return nil, err
		}
		u := url.URL{Scheme: "redis", Host: a.host, User: merge(auth, a.user)}
		if tlsOn {
			u.Scheme = "rediss"
		}
		if a.db != "" && a.db != "0" {
			u.Path = "/" + a.db
		}
		out["redis-url"] = u.String()
	case "CLUSTER":
		addrs, err := redisAddrs(addr)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if a.db != "" && a.db != "0" {
				return nil, fmt.Errorf("REDIS_URL=%s with REDIS_TYPE=CLUSTER: a cluster has no database %s", flagenv.Redacted(addr), a.db)
			}
		}
		out["redis-cluster"] = hosts(addrs)
		setCredentials(out, "redis-username", "redis-password", merge(auth, addrs[0].user))
	case "SENTINEL":
		master, list, ok := strings.Cut(addr, ",")
		if !ok {
			return nil, fmt.Errorf("REDIS_URL=%s with REDIS_TYPE=SENTINEL: want the master's name, then the sentinels' addresses, comma-separated", flagenv.Redacted(addr))
		}
		addrs, err := redisAddrs(list)
		if err != nil {
			return nil, err
		}
		// The reference's sentinel client takes the first sentinel URL's
		// credentials where REDIS_SENTINEL_AUTH gives none.
		out["redis-sentinel-master"], out["redis-sentinel-addrs"] = master, hosts(addrs)
		setCredentials(out, "redis-username", "redis-password", auth)
		setCredentials(out, "redis-sentinel-username", "redis-sentinel-password", merge(credentials(get("REDIS_SENTINEL_AUTH")), addrs[0].user))
	default:
		return nil, fmt.Errorf("REDIS_TYPE=%q: want SINGLE, CLUSTER or SENTINEL", t)
	}
	if t := strings.ToUpper(get("REDIS_TYPE")); tlsOn && (t == "CLUSTER" || t == "SENTINEL") {
		out["redis-tls"] = "true"
	}
	return out, nil
}

// credentials are REDIS_AUTH's ("password" or "user:password"), nil when
// it is empty.
func credentials(auth string) *url.Userinfo {
	if auth == "" {
		return nil
	}
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return url.UserPassword(u, p)
	}
	return url.UserPassword("", auth)
}

// merge takes the user and the password each from first, or from second
// where first has none, as radix fills a dialer's credentials from a URL;
// nil when neither has any.
func merge(first, second *url.Userinfo) *url.Userinfo {
	user := cmp.Or(first.Username(), second.Username())
	p1, _ := first.Password()
	p2, _ := second.Password()
	if user == "" && p1 == "" && p2 == "" {
		return nil
	}
	return url.UserPassword(user, cmp.Or(p1, p2))
}

func setCredentials(out map[string]string, userFlag, passwordFlag string, u *url.Userinfo) {
	if p, ok := u.Password(); ok && p != "" {
		out[userFlag], out[passwordFlag] = u.Username(), p
	}
}

// address is one Redis address of REDIS_URL: host:port, with what a
// redis:// URL adds.
type address struct {
	host string
	user *url.Userinfo // nil: none
	db   string
}

// redisAddr reads one address as radix does: host:port as it is, or a
// redis:// URL with credentials (or username and password in the query)
// and a database (the path, or db in the query). Errors show it redacted.
func redisAddr(s string) (address, error) {
	if !strings.Contains(s, "://") {
		return address{host: s}, nil
	}
	shown := flagenv.Redacted(s)
	if !strings.HasPrefix(s, "redis://") {
		return address{}, fmt.Errorf("REDIS_URL=%s: the reference reads host:port or a redis:// URL (TLS: REDIS_TLS=true)", shown)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		// url.Parse's error quotes the URL, and its reason can hold part
		// of a password.
		return address{}, fmt.Errorf("REDIS_URL=%s: not a redis:// URL (a password's reserved characters must be percent-encoded)", shown)
	}
	q := u.Query()
	a := address{host: u.Host, user: u.User, db: q.Get("db")}
	if p := q.Get("password"); a.user == nil && p != "" {
		a.user = url.UserPassword(q.Get("username"), p)
	}
	if u.Path != "" && u.Path != "/" {
		a.db = strings.TrimPrefix(u.Path, "/")
	}
	if a.db != "" && strings.Trim(a.db, "0123456789") != "" {
		return address{}, fmt.Errorf("REDIS_URL=%s: the database must be a number", shown)
	}
	return a, nil
}

// redisAddrs reads a comma-separated list of addresses.
func redisAddrs(list string) ([]address, error) {
	var out []address
	for _, s := range strings.Split(list, ",") {
		a, err := redisAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func hosts(addrs []address) string {
	var out []string
	for _, a := range addrs {
		out = append(out, a.host)
	}
	return strings.Join(out, ",")
}
