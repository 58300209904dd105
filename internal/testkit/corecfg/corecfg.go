// Package corecfg holds the descriptor configs the decision core's tests
// share: pkg/limiter's, which test its rules through limiter.Request, and
// pkg/rls's, which test the same rules as Envoy's wire carries them.
package corecfg

// Edge has a limit of each kind the core's rules speak of: a fixed
// window, a bucket with a burst, a shadow limit, a nested wildcard, a
// limit another replaces, an unlimited key, a blocked key and a sliding
// window of 30 s.
const Edge = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-client, algorithm: fixed_window}
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10, burst: 20, name: per-key}
  - key: generic_key
    value: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadow, algorithm: fixed_window}
  - key: tenant
    descriptors:
      - key: path
        value: /reports*
        rate_limit: {unit: hour, requests_per_unit: 2, name: reports, algorithm: fixed_window}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 5, name: free-plan}
  - key: plan
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: vip-plan
      replaces: [{name: free-plan}]
  - key: open
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned}
  - key: window
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2, name: thirty-seconds, algorithm: sliding_window}
`

// Values limits by user agent: scanners blocked, every other agent 2 a
// minute.
const Values = `domain: edge
descriptors:
  - key: user_agent
    value: "*sqlmap*"
    rate_limit: {unit: minute, requests_per_unit: 0, name: scanners}
  - key: user_agent
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-agent, algorithm: fixed_window}
`

// T0 is 15 s into a minute of the Unix epoch, in µs: the injected time
// the tests' in-memory stores start at.
const T0 = int64(1_780_000_200+15) * 1_000_000
