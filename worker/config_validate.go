package worker

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/slotcron/slotcron/jobs"
	"github.com/slotcron/slotcron/scheduler"
	"github.com/slotcron/slotcron/slot"
)

// validate checks the config, defaults applied, and records every problem
// on the line of the field it is about (or of its closest parent).
func (c *Config) validate(d *decoder) {
	bad := func(path, format string, args ...any) {
		line := d.lineOf(path)
		if env, ok := d.env[path]; ok {
			format += " (set by " + env + ")"
			if _, inFile := d.lines[path]; !inFile {
				line = 0 // no line of the file is at fault
			}
		}
		d.errorf(line, path, format, args...)
	}
	if err := slot.CheckReplicaID(c.ReplicaID); err != nil {
		bad("replica_id", "%v", err)
	}
	r := c.Redis
	switch r.Mode {
	case ModeSingle:
		if len(r.Addrs) != 1 {
			bad("redis.addrs", "mode single takes one address, found %d", len(r.Addrs))
		}
	case ModeSentinel:
		if len(r.Addrs) == 0 {
			bad("redis.addrs", "mode sentinel needs the sentinels' addresses")
		}
		if r.MasterName == "" {
			bad("redis.master_name", "mode sentinel needs the master's name")
		}
	case ModeCluster:
		if len(r.Addrs) == 0 {
			bad("redis.addrs", "mode cluster needs at least one node's address")
		}
		if r.DB != 0 {
			bad("redis.db", "Redis Cluster has only database 0")
		}
	case ModeEmbedded:
		if len(r.Addrs) > 0 {
			bad("redis.addrs", "mode embedded runs its own in-process Redis; remove the addresses")
		}
		if r.WaitReplicas > 0 { // (miniredis answers every WAIT with 0: every finish would say unreplicated)
			bad("redis.wait_replicas", "mode embedded has no replicas to wait for")
		}
	default:
		bad("redis.mode", "must be single, sentinel, cluster or embedded, got %q", r.Mode)
	}
	if r.Mode != ModeSentinel {
		if r.MasterName != "" {
			bad("redis.master_name", "set, but redis.mode is %s (the master's name is for mode sentinel)", r.Mode)
		}
		for _, f := range []struct{ path, v string }{{"redis.sentinel_username", r.SentinelUsername}, {"redis.sentinel_password", r.SentinelPassword}} {
			if f.v != "" {
				bad(f.path, "set, but redis.mode is %s (the sentinels' credentials are for mode sentinel)", r.Mode)
			}
		}
	}
	for i, a := range r.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			bad(fmt.Sprintf("redis.addrs[%d]", i), "%q is not host:port", a)
		}
	}
	if r.DB < 0 {
		bad("redis.db", "must be >= 0, got %d", r.DB)
	}
	if r.TLS.InsecureSkipVerify && !r.TLS.Enabled {
		bad("redis.tls.insecure_skip_verify", "true, but tls.enabled is false")
	}
	if r.TLS.CAFile != "" {
		if _, err := os.Stat(r.TLS.CAFile); err != nil {
			bad("redis.tls.ca_file", "%v", err)
		}
		if !r.TLS.Enabled {
			bad("redis.tls.ca_file", "set, but tls.enabled is false")
		}
	}
	if r.WaitReplicas < 0 {
		bad("redis.wait_replicas", "must be >= 0, got %d", r.WaitReplicas)
	}
	if r.WaitReplicas > 0 && r.Mode == ModeCluster {
		bad("redis.wait_replicas", "is not supported on a Redis Cluster")
	}
	if r.WaitTimeout < 0 {
		bad("redis.wait_timeout", "must be > 0, got %v", r.WaitTimeout)
	}
	if r.WaitReplicas > 0 && r.WaitTimeout >= 0 && r.WaitTimeout < time.Millisecond {
		bad("redis.wait_timeout", "must be at least 1ms (WAIT counts whole milliseconds, and WAIT with 0 waits forever), got %v", r.WaitTimeout)
	}
	if r.WaitReplicas > 0 && r.WaitTimeout > redisReadTimeout/3 {
		// With a replica down, every batch would wait this long for its
		// answer, and the client give up reading it: claims and finishes
		// written in Redis would be reported as failed.
		bad("redis.wait_timeout", "must be at most %v (the answer to a batch comes after its WAIT, and the client waits %v for it), got %v",
			redisReadTimeout/3, redisReadTimeout, r.WaitTimeout)
	}
	if strings.ContainsAny(r.KeyPrefix, "{} ") {
		bad("redis.key_prefix", "%q must be free of '{', '}' and spaces", r.KeyPrefix)
	}
	if c.Lease.TTL < scheduler.MinLeaseTTL {
		// renew_every, by default a third of it, can't be judged against it.
		bad("lease.ttl", "must be at least %v, got %v", scheduler.MinLeaseTTL, c.Lease.TTL)
	} else if err := scheduler.CheckRenewEvery(c.Lease.RenewEvery, c.Lease.TTL); err != nil {
		bad("lease.renew_every", "%v", err)
	} else if most := ((c.Lease.TTL - c.Lease.RenewEvery) / 3).Truncate(time.Millisecond); r.WaitReplicas > 0 && r.WaitTimeout > most {
		// A lease is valid from its claim's send, and the claim's answer
		// comes after its WAIT (two, when a restarted Redis had lost the
		// scripts): with a replica down, a wait_timeout near the TTL would
		// leave every won claim's lease run out before its job starts.
		bad("redis.wait_timeout", "must be at most %v, a third of what lease.ttl (%v) leaves after lease.renew_every (%v): "+
			"a won claim's answer comes after its WAIT (two after a Redis restart), and its lease must last until its first renewal, got %v",
			most, c.Lease.TTL, c.Lease.RenewEvery.Round(time.Millisecond), r.WaitTimeout)
	}
	if c.Clock.WarnSkew <= 0 {
		bad("clock.warn_skew", "must be > 0, got %v", c.Clock.WarnSkew)
	}
	if c.Clock.MaxSkew < c.Clock.WarnSkew {
		bad("clock.max_skew", "must be >= clock.warn_skew (%v), got %v", c.Clock.WarnSkew, c.Clock.MaxSkew)
	}
	if c.HTTP.Listen != "" {
		if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			bad("http.listen", "%q is not host:port (use :8080 for every interface, \"\" for no HTTP)", c.HTTP.Listen)
		} else if _, err := net.LookupPort("tcp", port); err != nil { // what net.Listen does with it
			bad("http.listen", "%q: the port %q is neither a number from 0 to 65535 nor a service name", c.HTTP.Listen, port)
		}
	}
	switch c.Tracing.Exporter {
	case ExporterOTLPGRPC, ExporterOTLPHTTP, ExporterStdout, ExporterNone:
	default:
		bad("tracing.exporter", "must be otlp-grpc, otlp-http, stdout or none, got %q", c.Tracing.Exporter)
	}
	if c.Tracing.Exporter == ExporterOTLPGRPC || c.Tracing.Exporter == ExporterOTLPHTTP {
		c.Tracing.checkEndpoint(bad)
	}
	if u := c.Tracing.UIURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("tracing.ui_url", "%q is not an http:// or https:// URL (Jaeger's UI: http://jaeger:16686)", u)
		}
	}
	if !(c.Tracing.SampleRatio >= 0 && c.Tracing.SampleRatio <= 1) { // NaN (YAML's .nan) too
		bad("tracing.sample_ratio", "must be within [0, 1], got %v", c.Tracing.SampleRatio)
	}
	c.Alerts.validate(bad)
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace", "must be >= 0, got %v", c.ShutdownGrace)
	}
	seen := map[string]int{}
	for i, jc := range c.Jobs {
		p := fmt.Sprintf("jobs[%d]", i)
		j := jc.schedulerJob().WithDefaults(c.Lease.TTL)
		for _, fe := range j.Validate(c.Clock.MaxSkew) {
			if fe.Field == "lease_ttl" {
				continue // reported on lease.ttl
			}
			bad(p+"."+fe.Field, "%v", fe.Err)
		}
		if first, ok := seen[jc.Name]; ok && jc.Name != "" {
			bad(p+".name", "%q is listed twice (also jobs[%d])", jc.Name, first)
		}
		seen[jc.Name] = i
	}
}

// checkEndpoint checks the endpoint of an OTLP exporter. Traces go in
// plaintext unless the endpoint is an https:// URL, so a plaintext endpoint
// on a host that is not loopback must be asked for, with insecure: true:
// span attributes name jobs, replicas and errors.
func (t TracingConfig) checkEndpoint(bad func(path, format string, args ...any)) {
	host, encrypted, ok := endpointHost(t.Endpoint)
	switch {
	case !ok:
		bad("tracing.endpoint", "%q is not host:port, http://host:port or https://host:port", t.Endpoint)
	case encrypted && t.Insecure:
		bad("tracing.insecure", "true, but tracing.endpoint is https://")
	case !encrypted && !t.Insecure && !loopback(host):
		bad("tracing.endpoint", "%q is not loopback, and traces would go to it in plaintext; write %s for TLS, or set tracing.insecure: true",
			t.Endpoint, "https://"+strings.TrimPrefix(t.Endpoint, "http://"))
	}
}

// endpointHost returns the host of an OTLP endpoint, host:port or an
// http:// or https:// URL, and whether it is https://. The scheme must be
// written in lower case, as the exporters compare it.
func endpointHost(endpoint string) (host string, https, ok bool) {
	if !strings.Contains(endpoint, "://") {
		h, port, err := net.SplitHostPort(endpoint)
		if err != nil || h == "" || port == "" {
			return "", false, false
		}
		return h, false, true
	}
	https = strings.HasPrefix(endpoint, "https://")
	u, err := url.Parse(endpoint)
	if err != nil || !(https || strings.HasPrefix(endpoint, "http://")) || u.Hostname() == "" {
		return "", false, false
	}
	return u.Hostname(), https, true
}

// loopback reports whether host names this machine: localhost (in any
// case) or a loopback address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkRegistered reports the jobs of the table that no Func is registered
// under, and an empty table, naming the registered jobs.
func (c *Config) checkRegistered(d *decoder, registered []string) {
	if d.broken {
		return
	}
	names := strings.Join(registered, ", ")
	if len(registered) == 0 {
		names = "none"
	}
	if len(c.Jobs) == 0 {
		d.errorf(d.lineOf("jobs"), "jobs", "the cron table is empty; registered jobs: %s", names)
	}
	for i, jc := range c.Jobs {
		if jc.Name != "" && jobs.ValidateName(jc.Name) == nil && !slices.Contains(registered, jc.Name) {
			p := fmt.Sprintf("jobs[%d].name", i)
			d.errorf(d.lineOf(p), p, "no job %q is registered; registered: %s", jc.Name, names)
		}
	}
	d.summarize()
}

// validate checks alerts: URLs, event kinds, limits.
func (a AlertsConfig) validate(bad func(path, format string, args ...any)) {
	for i, u := range a.Webhooks {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad(fmt.Sprintf("alerts.webhooks[%d]", i), "%q is not an http:// or https:// URL", u)
		}
	}
	var kinds []string
	for _, k := range scheduler.EventKinds {
		kinds = append(kinds, string(k))
	}
	for i, e := range a.Events {
		if !slices.Contains(kinds, e) {
			bad(fmt.Sprintf("alerts.events[%d]", i), "%q is not an event; the events are %s", e, strings.Join(kinds, ", "))
		}
	}
	if a.Timeout < 0 {
		bad("alerts.timeout", "must be > 0, got %v", a.Timeout)
	}
	if a.Timeout > maxAlertTimeout {
		bad("alerts.timeout", "must be at most %v (a replica holds a delivery %v for one attempt and its record; a POST still going after that may be sent again by another replica), got %v",
			maxAlertTimeout, alertHold, a.Timeout)
	}
	if a.MaxAttempts < 0 {
		bad("alerts.max_attempts", "must be >= 1, got %d", a.MaxAttempts)
	}
	for _, c := range a.SecretEnv {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			bad("alerts.secret_env", "%q is not an environment variable's name", a.SecretEnv)
			break
		}
	}
}
