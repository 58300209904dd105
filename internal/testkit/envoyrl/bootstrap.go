// Package envoyrl reads Envoy bootstraps the way Envoy does and computes
// what Envoy's HTTP rate limit filter (envoy.filters.http.ratelimit) sends
// to a rate limit service for a given HTTP request: the route it matches,
// the rate_limits lists that apply to it, and the descriptors their actions
// produce. The envoy/ tests use it to keep the bootstraps and the
// descriptor config in step; the e2e tests use it to drive sluice with
// exactly the requests Envoy would send, since no Envoy binary runs here.
//
// It models the part of Envoy that sluice's bootstraps use, and fails with
// an error naming anything else rather than guessing: route matching by
// prefix, path, safe_regex and headers; the actions remote_address,
// request_headers, generic_key and header_value_match; hits_addend.number
// and its is_negative_hits (a refund, Envoy 1.38);
// per-route, virtual host and filter-level lists; the trusted client
// address from X-Forwarded-For.
//
// It depends on go-control-plane and a YAML parser, not on sluice.
package envoyrl

import (
	"encoding/json"
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	// Every typed_config in sluice's bootstraps names one of these types.
	// protojson resolves an Any through protoregistry.GlobalTypes, which
	// the generated packages fill at init, so each extension a bootstrap
	// uses must be imported here; a missing one fails with "unable to
	// resolve".
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// IsBootstrap reports whether the YAML document data is an Envoy bootstrap:
// a mapping with static_resources or dynamic_resources at the top.
func IsBootstrap(data []byte) (bool, error) {
	doc, err := yamlToJSONValue(data)
	if err != nil {
		return false, err
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return false, nil
	}
	_, static := top["static_resources"]
	_, dynamic := top["dynamic_resources"]
	return static || dynamic, nil
}

// ParseBootstrap parses a YAML bootstrap as Envoy's loader does: anchors and
// aliases resolved, unknown fields an error, every typed_config resolved to
// its registered type.
func ParseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	b := &bootstrapv3.Bootstrap{}
	if err := ParseYAML(data, b); err != nil {
		return nil, err
	}
	return b, nil
}

// ParseYAML reads one of Envoy's YAML documents into m as Envoy's loader
// does: unknown fields are an error, and every Any must resolve to a
// registered type.
func ParseYAML(data []byte, m proto.Message) error {
	doc, err := yamlToJSONValue(data)
	if err != nil {
		return err
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("not a valid %s: %w", proto.MessageName(m), err)
	}
	return nil
}

// yamlToJSONValue decodes one YAML document (anchors and aliases resolved,
// as Envoy's loader does) into values that encoding/json can marshal.
func yamlToJSONValue(data []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return jsonValue(v)
}

func jsonValue(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			v[k] = c
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			s, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v (%T) is not a string", k, k)
			}
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s, err)
			}
			m[s] = c
		}
		return m, nil
	case []any:
		for i, e := range v {
			c, err := jsonValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			v[i] = c
		}
		return v, nil
	default:
		return v, nil
	}
}
