package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"
)

// MinAdminTokenLength is the shortest admin token Load accepts.
const MinAdminTokenLength = 16

// Upper bounds that keep arithmetic on the values (seconds times
// time.Second, a channel of concurrency slots) sane; anything near them is
// a typo rather than a choice.
const (
	maxLeaseSeconds   = 24 * 60 * 60
	maxTimeoutSeconds = 60 * 60
	maxConcurrency    = 10000
	// A limit on guesses above this is no limit; a table above this is
	// hundreds of megabytes.
	maxAuthFailures       = 10000
	maxAuthFailureClients = 1000000
	// More connections than this would need more descriptors than
	// systems grant, and gigabytes of buffers.
	maxConnections = 1000000
)

// checker applies the rules to one configuration. src says where each
// key's value came from, for messages; it may be nil.
type checker struct {
	r   *report
	src map[string]string
}

// key returns the reporter of one key's rules.
func (v checker) key(key string) rule {
	k := rule{r: v.r, key: key}
	if s := v.src[key]; s != "" {
		k.at = " (set " + s + ")"
	}
	return k
}

func (v checker) warn(format string, args ...any) { v.r.warn(format, args...) }

// rule reports the problems of one key. A message it files begins with
// the key and where its value came from, so a rule names its key once and
// the reader always learns which file, variable or flag to fix.
type rule struct {
	r   *report
	key string
	// at is " (set by FORMS_X)" or the like; empty for a default value.
	at string
}

// String is the key as a message shows it, with where it was set.
func (k rule) String() string { return k.key + k.at }

// ok says whether the key has no problem yet: a rule that depends on a key
// already refused stays quiet rather than pile on.
func (k rule) ok() bool { return !k.r.bad[k.key] }

// invalid files a problem: the key, where it was set, then format.
func (k rule) invalid(format string, args ...any) {
	k.r.invalid(k.key, "%s"+format, append([]any{k}, args...)...)
}

// invalidText files a problem under the key whose message is written
// whole, for the few that do not open with the key as it was set.
func (k rule) invalidText(format string, args ...any) { k.r.invalid(k.key, format, args...) }

// count refuses a number below 1, or above upper when upper is positive.
func (k rule) count(n, def, upper int) {
	if !k.ok() {
		return
	}
	switch {
	case n < 1:
		k.invalid(" is %d: it must be at least 1 (the default is %d)", n, def)
	case upper > 0 && n > upper:
		k.invalid(" is %d: it must be at most %d (the default is %d)", n, upper, def)
	}
}

// positive refuses a duration that is zero or negative.
func (k rule) positive(d, def time.Duration) {
	if k.ok() && d <= 0 {
		k.invalid(" is %s: it must be a positive duration such as %s (the default)", formatDuration(d), formatDuration(def))
	}
}

// check applies every rule, section by section, normalising what it may
// (log level case, the SHA-256 pins). src says where each key's value came
// from, for messages; it may be nil. The order of the sections is the
// order problems and warnings are reported in.
func (c *Config) check(r *report, src map[string]string) {
	v := checker{r: r, src: src}
	d := Default()
	c.checkDatabase(v)
	c.checkSecrets(v)
	c.checkServer(v, d.Server)
	c.warnSecretFlags(v)
	c.checkWorker(v, d.Workers)
	c.checkWebhook(v, d.Webhook)
	c.checkLease(v)
	c.checkPlugins(v, d.Plugins)
	c.checkConsole(v, d.Console)
	c.checkPortal(v)
	c.checkTelemetry(v)
	c.checkRetention(v)
	c.checkEndpoints(v, d.Endpoints)
	c.checkLog(v)
}

func (c *Config) checkDatabase(v checker) {
	if k := v.key("database.url"); k.ok() {
		if problem := checkDatabaseURL(c.Database.URL.Reveal()); problem != "" {
			k.invalid(" %s", problem)
		}
	}
}

// checkSecrets checks that the secrets key is given one way at most, and
// that a key given in the config is one.
func (c *Config) checkSecrets(v checker) {
	key, file := v.key("secrets.key"), v.key("secrets.key_file")
	if !key.ok() || !file.ok() {
		return
	}
	text := c.Secrets.Key.Reveal()
	switch {
	case text != "" && c.Secrets.KeyFile != "":
		key.invalid(" and %s are both set: give the key one way only", file)
	case text != "":
		if _, err := secretbox.ParseKey(text); err != nil {
			key.invalid(" is not a 32-byte key in base64 or hex (%v): make one with openssl rand -base64 32 (the value is not shown)", err)
		}
	case c.Secrets.KeyFile != "" && strings.TrimSpace(c.Secrets.KeyFile) != c.Secrets.KeyFile:
		file.invalid(" begins or ends with white space: remove it")
	}
}

func (c *Config) checkServer(v checker, d ServerConfig) {
	s := c.Server
	listen, dev := v.key("server.listen"), v.key("server.insecure_dev_mode")
	if listen.ok() {
		if problem := checkListen(s.Listen); problem != "" {
			listen.invalid(" %s", problem)
		}
	}
	c.checkAdminToken(v.key("server.admin_token"), dev)
	c.checkIngestKeys(v.key("server.ingest_keys"))
	c.checkDevMode(v, dev, listen)
	if k := v.key("server.max_body_bytes"); k.ok() && s.MaxBodyBytes < 1 {
		k.invalid(" is %d: it must be a positive number of bytes (the default is %d, 1 MiB)", s.MaxBodyBytes, d.MaxBodyBytes)
	}
	if k := v.key("server.max_nesting_depth"); k.ok() && (s.MaxNestingDepth < 1 || s.MaxNestingDepth > faceopts.MaxNestingDepthLimit) {
		k.invalid(" is %d: it must be from 1 to %d levels (the default is %d)", s.MaxNestingDepth, faceopts.MaxNestingDepthLimit, d.MaxNestingDepth)
	}
	v.key("server.secret_rotation_grace").positive(s.SecretRotationGrace, d.SecretRotationGrace)
	v.key("server.read_header_timeout").positive(s.ReadHeaderTimeout, d.ReadHeaderTimeout)
	v.key("server.read_timeout").positive(s.ReadTimeout, d.ReadTimeout)
	v.key("server.write_timeout").positive(s.WriteTimeout, d.WriteTimeout)
	v.key("server.idle_timeout").positive(s.IdleTimeout, d.IdleTimeout)
	if k := v.key("server.max_header_bytes"); k.ok() && s.MaxHeaderBytes < 4096 {
		k.invalid(" is %d: it must be at least 4096 bytes (the default is %d, 64 KiB)", s.MaxHeaderBytes, d.MaxHeaderBytes)
	}
	c.checkConnections(v)
	v.key("server.auth_failures").count(s.AuthFailures, d.AuthFailures, maxAuthFailures)
	v.key("server.auth_failure_window").positive(s.AuthFailureWindow, d.AuthFailureWindow)
	v.key("server.auth_failure_clients").count(s.AuthFailureClients, d.AuthFailureClients, maxAuthFailureClients)
	if cert, key := v.key("server.tls_cert_file"), v.key("server.tls_key_file"); cert.ok() && key.ok() {
		switch {
		case s.TLSCertFile != "" && s.TLSKeyFile == "":
			key.invalid(" is not set but server.tls_cert_file is: set both to serve HTTPS, or neither for plain HTTP")
		case s.TLSCertFile == "" && s.TLSKeyFile != "":
			cert.invalid(" is not set but server.tls_key_file is: set both to serve HTTPS, or neither for plain HTTP")
		}
	}
	if k := v.key("server.trusted_proxies"); k.ok() {
		for i, p := range s.TrustedProxies {
			if p.Bits() == 0 {
				// Trusting every peer would let any client name its own
				// address and so escape the failure limit.
				k.invalid(" item %d is %s, which trusts every address, so any client could choose the address it is counted as: list only your proxies' addresses", i+1, p)
			}
		}
	}
}

// checkConnections refuses negative connection limits (0 is the default
// derived from the descriptor limit) and a per-address limit above a
// total that is set.
func (c *Config) checkConnections(v checker) {
	s := c.Server
	total, per := v.key("server.max_connections"), v.key("server.max_connections_per_address")
	for _, k := range []struct {
		rule
		n int
	}{{total, s.MaxConnections}, {per, s.MaxConnectionsPerAddress}} {
		switch {
		case !k.ok():
		case k.n < 0:
			k.invalid(" is %d: it must be a number of connections, or 0 to derive it from the open-file limit (the default)", k.n)
		case k.n > maxConnections:
			k.invalid(" is %d: it must be at most %d, or 0 to derive it from the open-file limit (the default)", k.n, maxConnections)
		}
	}
	if total.ok() && per.ok() && s.MaxConnections > 0 && s.MaxConnectionsPerAddress > s.MaxConnections {
		per.invalid(" is %d, more than the %d connections %s allows in all: lower it, or raise %s", s.MaxConnectionsPerAddress, s.MaxConnections, total, total.key)
	}
}

// checkAdminToken wants a token unless dev mode is on, and a long one
// without stray white space when it is given.
func (c *Config) checkAdminToken(k, dev rule) {
	if !k.ok() || !dev.ok() {
		return
	}
	tok := c.Server.AdminToken.Reveal()
	switch {
	case tok == "" && !c.Server.InsecureDevMode:
		k.invalidText("server.admin_token is not set: set FORMS_SERVER_ADMIN_TOKEN to a random string of at least %d characters (e.g. the output of openssl rand -hex 32), or set server.insecure_dev_mode=true on a development machine", MinAdminTokenLength)
	case tok != "" && strings.TrimSpace(tok) != tok:
		k.invalid(" begins or ends with white space, most likely a stray newline: remove it (the value is not shown)")
	case tok != "" && utf8.RuneCountInString(tok) < MinAdminTokenLength:
		k.invalid(" is shorter than %d characters: use a long random string, e.g. the output of openssl rand -hex 32 (the value is not shown)", MinAdminTokenLength)
	}
}

func (c *Config) checkIngestKeys(k rule) {
	if !k.ok() {
		return
	}
	for i, key := range c.Server.IngestKeys {
		s := key.Reveal()
		switch {
		case s == "":
			k.invalid(": item %d is empty: remove it or give it a value", i+1)
		case strings.TrimSpace(s) != s:
			k.invalid(": item %d begins or ends with white space: remove it (the value is not shown)", i+1)
		case s == c.Server.AdminToken.Reveal():
			k.invalid(": item %d is the same as server.admin_token: ingest keys are handed to form front ends, so give them values of their own", i+1)
		}
	}
}

// checkDevMode refuses dev mode on an address other machines can reach:
// it answers anyone without a token, so this is a refusal, not a warning.
func (c *Config) checkDevMode(v checker, dev, listen rule) {
	if !c.Server.InsecureDevMode || !dev.ok() || !listen.ok() {
		return
	}
	if isLoopback(c.Server.Listen) {
		v.warn("INSECURE: server.insecure_dev_mode is true, so the API lets callers in without the admin token: use it only on a development machine, never in production")
		return
	}
	port := "8080"
	if _, p, err := net.SplitHostPort(c.Server.Listen); err == nil && p != "" {
		port = p
	}
	dev.invalidText("server.insecure_dev_mode is true but %s is %s, which other machines can reach, and dev mode lets anyone in without a token: listen on loopback (127.0.0.1:%s, [::1]:%s or localhost:%s), or turn server.insecure_dev_mode off and set FORMS_SERVER_ADMIN_TOKEN",
		listen, quote(c.Server.Listen), port, port, port)
}

// warnSecretFlags warns of secrets given as flags: other users of the
// machine can read a process's arguments.
func (c *Config) warnSecretFlags(v checker) {
	byFlag := func(key string) bool { return strings.HasPrefix(v.src[key], "by --") }
	for _, key := range []string{"server.admin_token", "server.ingest_keys", "secrets.key", "webhook.proxy_password"} {
		if byFlag(key) {
			v.warn("%s was given as a flag: other users of this machine can read it in the process list; use %s or the config file", key, envName(key))
		}
	}
	if byFlag("database.url") && hasPassword(c.Database.URL.Reveal()) {
		v.warn("database.url was given as a flag with a password in it: other users of this machine can read it in the process list; use FORMS_DATABASE_URL or the config file")
	}
}

func (c *Config) checkWorker(v checker, d WorkerConfig) {
	w := c.Workers
	v.key("worker.lease_seconds").count(w.LeaseSeconds, d.LeaseSeconds, maxLeaseSeconds)
	v.key("worker.concurrency").count(w.Concurrency, d.Concurrency, maxConcurrency)
	v.key("worker.batch_size").count(w.BatchSize, d.BatchSize, maxConcurrency)
	v.key("worker.max_attempts").count(w.MaxAttempts, d.MaxAttempts, 0)
	v.key("worker.poll_interval").positive(w.PollInterval, d.PollInterval)
	if k := v.key("worker.retry_delays"); k.ok() {
		if len(w.RetryDelays) == 0 {
			k.invalid(" is empty: give at least one delay, e.g. 30s,2m,10m,1h")
		}
		for i, delay := range w.RetryDelays {
			if delay <= 0 {
				k.invalid(": item %d is %s: every delay must be positive, e.g. 30s", i+1, formatDuration(delay))
			}
		}
	}
	if k, s := v.key("worker.endpoint_share"), w.EndpointShare; k.ok() && !(s > 0 && s <= 1) {
		k.invalid(" is %s: it must be more than 0 and at most 1 (0.25 lets one endpoint hold a quarter of the senders while others wait; 1 turns the share off)", strconv.FormatFloat(s, 'g', -1, 64))
	}
	if k, j := v.key("worker.retry_jitter"), w.RetryJitter; k.ok() && (j < 0 || j >= 1) {
		k.invalid(" is %s: it must be at least 0 and less than 1 (0.2 spreads each delay by ±20%%)", strconv.FormatFloat(j, 'g', -1, 64))
	}
	if k := v.key("worker.max_retry_after"); k.ok() && w.MaxRetryAfter < 0 {
		k.invalid(" is %s: it must not be negative (0 ignores Retry-After; the default is %s)", formatDuration(w.MaxRetryAfter), formatDuration(d.MaxRetryAfter))
	}
}

func (c *Config) checkWebhook(v checker, d WebhookConfig) {
	w := c.Webhook
	v.key("webhook.connect_timeout_seconds").count(w.ConnectTimeoutSeconds, d.ConnectTimeoutSeconds, maxTimeoutSeconds)
	v.key("webhook.read_timeout_seconds").count(w.ReadTimeoutSeconds, d.ReadTimeoutSeconds, maxTimeoutSeconds)
	if v.key("webhook.allowed_networks").ok() {
		for _, p := range w.AllowedNetworks {
			if p.Bits() == 0 {
				v.warn("webhook.allowed_networks contains %s, which allows every address: endpoints can then reach this server's own network and cloud metadata services; list only the networks of receivers you trust", p)
			}
		}
	}
	c.checkProxy(v)
}

// checkLease holds the product's rule: the lease must comfortably outlast
// the timeouts, or a delivery still in flight is claimed and sent again by
// another worker. The worker itself refuses a lease that does not cover
// the whole send deadline (the timeouts plus PluginHopMargin), so that is
// where refusal starts; below twice the timeouts is allowed, with a
// warning.
func (c *Config) checkLease(v checker) {
	lease := v.key("worker.lease_seconds")
	if !lease.ok() || !v.key("webhook.connect_timeout_seconds").ok() || !v.key("webhook.read_timeout_seconds").ok() {
		return
	}
	secs, conn, read := c.Workers.LeaseSeconds, c.Webhook.ConnectTimeoutSeconds, c.Webhook.ReadTimeoutSeconds
	sum := conn + read
	margin := int(PluginHopMargin / time.Second)
	advice := max(2*sum, sum+margin+1)
	switch {
	case secs <= sum+margin:
		lease.invalidText("worker.lease_seconds (%d) must comfortably outlast webhook.connect_timeout_seconds + webhook.read_timeout_seconds (%d + %d = %d s; with the %d s plugin margin a send may take %d s): a delivery still in flight when its lease ends is claimed and sent again by another worker. Raise worker.lease_seconds to %d or more, or lower the timeouts",
			secs, conn, read, sum, margin, sum+margin, advice)
	case secs < 2*sum:
		v.warn("worker.lease_seconds (%d) is less than twice webhook.connect_timeout_seconds + webhook.read_timeout_seconds (%d s): a slow receiver or a paused process can outlast the lease and get a delivery sent twice; %d or more keeps the margin the defaults have",
			secs, sum, advice)
	}
}

func (c *Config) checkPlugins(v checker, d PluginsConfig) {
	p := c.Plugins
	if k := v.key("plugins.dir"); k.ok() && strings.TrimSpace(p.Dir) != p.Dir {
		k.invalid(" %s begins or ends with white space: remove it", quote(p.Dir))
	}
	v.key("plugins.send_grace").positive(p.SendGrace, d.SendGrace)
	v.key("plugins.start_timeout").positive(p.StartTimeout, d.StartTimeout)
	v.key("plugins.validate_timeout").positive(p.ValidateTimeout, d.ValidateTimeout)
	if v.key("plugins.list").ok() {
		c.checkPluginList(v)
	}
}

// checkPluginList checks plugins.list entry by entry, normalising the
// SHA-256 pins.
func (c *Config) checkPluginList(v checker) {
	// The http plugin's settings that the webhook section sets, with the
	// key that sets each.
	webhookSets := []struct{ setting, key string }{
		{settingConnectTimeout, "webhook.connect_timeout_seconds"},
		{settingReadTimeout, "webhook.read_timeout_seconds"},
		{settingAllowedNetworks, "webhook.allowed_networks"},
		{settingProxy, "webhook.proxy"},
		{settingProxyUsername, "webhook.proxy_username"},
		{settingProxyPassword, "webhook.proxy_password"},
	}
	seen := map[string]int{}
	for i := range c.Plugins.List {
		p := &c.Plugins.List[i]
		entry := fmt.Sprintf("plugins.list[%d]", i)
		name := v.key(entry + ".name")
		if !validPluginName(p.Name) {
			name.invalid(" %s is not a plugin name: use lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63 in all", quote(p.Name))
			continue
		}
		if j, dup := seen[p.Name]; dup {
			name.invalid(": plugin %s is already configured by plugins.list[%d]: keep one entry", p.Name, j)
		}
		seen[p.Name] = i
		if p.SHA256 != "" {
			sum := strings.ToLower(strings.TrimSpace(p.SHA256))
			if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
				v.key(entry+".sha256").invalid(" (plugin %s) is not a SHA-256 sum: give the 64 hex digits that sha256sum prints for the binary, taken from a trusted source", p.Name)
			} else {
				p.SHA256 = sum
			}
		}
		if strings.TrimSpace(p.Path) != p.Path {
			v.key(entry+".path").invalid(" (plugin %s) begins or ends with white space: remove it", p.Name)
		}
		if p.Name != HTTPPlugin {
			continue
		}
		for _, s := range webhookSets {
			if _, ok := p.Settings[s.setting]; !ok {
				continue
			}
			why := "so that the lease check sees it"
			if strings.HasPrefix(s.setting, settingProxy) {
				why = "where it is checked and its password kept out of every display"
			}
			v.key(entry+".settings."+s.setting).invalid(": the http plugin's %s comes from %s, %s: set that instead and remove this setting", s.setting, s.key, why)
		}
	}
}

// validPluginName matches the plugin host's rule: [a-z0-9][a-z0-9_-]{0,62}.
func validPluginName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

func (c *Config) checkConsole(v checker, d ConsoleConfig) {
	if k := v.key("console.trace_url_template"); k.ok() {
		if _, err := telemetry.ParseTraceURLTemplate(c.Console.TraceURLTemplate); err != nil {
			k.invalid(" %s %v", quote(c.Console.TraceURLTemplate), err)
		}
	}
	v.key("console.session_ttl").positive(c.Console.SessionTTL, d.SessionTTL)
}

func (c *Config) checkPortal(v checker) {
	if k := v.key("portal.frame_ancestors"); k.ok() {
		if err := faceopts.CheckFrameAncestors(c.Portal.FrameAncestors); err != nil {
			k.invalid(": %v", err)
		}
	}
	if k := v.key("portal.accent_color"); k.ok() {
		if err := faceopts.CheckAccentColor(c.Portal.AccentColor); err != nil {
			k.invalid(": %v", err)
		}
	}
}

// checkTelemetry checks the telemetry section, normalising the exporter's
// case.
func (c *Config) checkTelemetry(v checker) {
	t := &c.Telemetry
	exporter := v.key("telemetry.exporter")
	if exporter.ok() {
		t.Exporter = strings.ToLower(strings.TrimSpace(t.Exporter))
		if t.Exporter == "" {
			t.Exporter = string(telemetry.ExporterNone)
		}
		if !telemetry.Exporter(t.Exporter).Valid() {
			exporter.invalid(" is %s: use none, otlp-grpc, otlp-http or stdout", quote(t.Exporter))
		}
	}
	exp := telemetry.Exporter(t.Exporter)
	if endpoint := v.key("telemetry.endpoint"); exporter.ok() && endpoint.ok() && v.key("telemetry.insecure").ok() {
		switch {
		case t.Endpoint != "" && !exp.OTLP():
			v.warn("telemetry.endpoint is set but telemetry.exporter is %s, which sends nothing to it; set telemetry.exporter to otlp-grpc or otlp-http", t.Exporter)
		case exp.OTLP():
			if _, err := telemetry.EndpointURL(exp, t.Endpoint, t.Insecure); err != nil {
				endpoint.invalid(": %v", err)
			}
		}
	}
	if k := v.key("telemetry.service_name"); k.ok() {
		switch name := t.ServiceName; {
		case strings.TrimSpace(name) == "":
			k.invalid(" is empty: name the service, e.g. %s (the default)", telemetry.DefaultServiceName)
		case strings.TrimSpace(name) != name:
			k.invalid(" %s begins or ends with white space: remove it", quote(name))
		}
	}
	c.checkResourceAttributes(v.key("telemetry.resource_attributes"))
	if t.MetricsPublic && !t.Metrics {
		v.warn("telemetry.metrics_public is true but telemetry.metrics is false, so there is no /metrics to make public; set telemetry.metrics=true or drop metrics_public")
	}
}

// checkResourceAttributes wants key=value items with distinct keys, none
// of them service.name, which has a key of its own.
func (c *Config) checkResourceAttributes(k rule) {
	if !k.ok() {
		return
	}
	seen := map[string]int{}
	for i, kv := range c.Telemetry.ResourceAttributes {
		name, _, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		switch {
		case !ok || name == "":
			k.invalid(": item %d is %s, not key=value: write it as e.g. deployment.environment=production", i+1, quote(kv))
			continue
		case strings.ContainsAny(name, ", \t"):
			k.invalid(": item %d has the key %s, which contains a comma or white space: use a dotted name such as team.name", i+1, quote(name))
			continue
		case name == "service.name":
			k.invalid(": item %d sets service.name: set telemetry.service_name instead", i+1)
			continue
		}
		if j, dup := seen[name]; dup {
			k.invalid(": items %d and %d both set %s: keep one", j+1, i+1, name)
		}
		seen[name] = i
	}
}

// checkRetention checks the retention section. A very short age is
// refused: it would remove the history operators look at and the events
// idempotency keys are checked against almost as soon as they exist.
func (c *Config) checkRetention(v checker) {
	rc := c.Retention
	if k := v.key("retention.delivered_max_age"); k.ok() && rc.DeliveredMaxAge != 0 && rc.DeliveredMaxAge < MinRetention {
		k.invalid(" is %s: use 0 to keep everything, or at least %s, e.g. 720h for 30 days", formatDuration(rc.DeliveredMaxAge), formatDuration(MinRetention))
	}
	if k := v.key("retention.interval"); k.ok() && rc.Interval <= 0 {
		k.invalid(" is %s: it must be positive, e.g. 10m", formatDuration(rc.Interval))
	}
}

// MinRetention is the shortest retention.delivered_max_age accepted.
const MinRetention = time.Hour

// checkEndpoints checks the endpoints section.
func (c *Config) checkEndpoints(v checker, d EndpointsConfig) {
	ec := c.Endpoints
	if k := v.key("endpoints.disable_after_failing"); k.ok() && ec.DisableAfterFailing != 0 && ec.DisableAfterFailing < time.Minute {
		k.invalid(" is %s: use 0 to never disable for failing, or at least 1m, e.g. 120h", formatDuration(ec.DisableAfterFailing))
	}
	v.key("endpoints.health_interval").positive(ec.HealthInterval, d.HealthInterval)
	if op, id := v.key("endpoints.operator_endpoint"), ec.OperatorEndpoint; op.ok() && id != "" {
		if strings.TrimSpace(id) != id || !strings.HasPrefix(id, "ep_") {
			op.invalid(" %s is not an endpoint id: give the id the API answered when the endpoint was created, ep_ followed by 32 hex digits", quote(id))
		} else if !ec.DisableOnGone && ec.DisableAfterFailing == 0 {
			v.warn("endpoints.operator_endpoint is set but endpoint health is off (endpoints.disable_on_gone false, endpoints.disable_after_failing 0): the server never disables an endpoint on its own, so the operator endpoint is never told anything; turn one of them on, or leave operator_endpoint empty")
		}
	}
	minDelay, maxDelay := v.key("endpoints.retry_min_delay"), v.key("endpoints.retry_max_delay")
	minDelay.positive(ec.RetryMinDelay, d.RetryMinDelay)
	maxDelay.positive(ec.RetryMaxDelay, d.RetryMaxDelay)
	if minDelay.ok() && maxDelay.ok() && ec.RetryMaxDelay < ec.RetryMinDelay {
		maxDelay.invalid(" (%s) is shorter than endpoints.retry_min_delay (%s): the longest delay allowed must be at least the shortest",
			formatDuration(ec.RetryMaxDelay), formatDuration(ec.RetryMinDelay))
	}
	if k := v.key("endpoints.retry_max_attempts"); k.ok() && (ec.RetryMaxAttempts < 2 || ec.RetryMaxAttempts > storage.MaxRetrySchedule+1) {
		k.invalid(" is %d: it must be between 2 and %d (the default is %d)", ec.RetryMaxAttempts, storage.MaxRetrySchedule+1, d.RetryMaxAttempts)
	}
}

// checkLog checks the log section, normalising the case of both keys.
func (c *Config) checkLog(v checker) {
	if k := v.key("log.level"); k.ok() {
		c.Log.Level = strings.ToLower(strings.TrimSpace(c.Log.Level))
		switch c.Log.Level {
		case "debug", "info", "warn", "error":
		default:
			k.invalid(" is %s: use debug, info, warn or error", quote(c.Log.Level))
		}
	}
	if k := v.key("log.format"); k.ok() {
		c.Log.Format = strings.ToLower(strings.TrimSpace(c.Log.Format))
		switch c.Log.Format {
		case "text", "json":
		default:
			k.invalid(" is %s: use text or json", quote(c.Log.Format))
		}
	}
}

func envName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// checkDatabaseURL returns what is wrong with a database URL, to follow
// "database.url" in a message. It never shows the URL: it may hold a
// password.
func checkDatabaseURL(u string) string {
	const notShown = " (the value is not shown because it may hold a password)"
	switch {
	case u == "":
		return "is empty: set it to sqlite:PATH for one node (e.g. sqlite:/var/lib/hymical/hymical.db) or to postgres://USER:PASSWORD@HOST:5432/DB for many"
	case strings.HasPrefix(u, "sqlite:"):
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(u, "sqlite:"), "//")) == "" {
			return "names no file: write sqlite:PATH, e.g. sqlite:hymical.db or sqlite:/var/lib/hymical/hymical.db"
		}
		return ""
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		if _, err := url.Parse(u); err != nil {
			return "is not a PostgreSQL URL that can be parsed: check that the port is a number and that any of : / @ ? # % [ ] in the user name or password is percent-encoded" + notShown
		}
		return ""
	}
	hint := ""
	scheme, _, _ := strings.Cut(u, ":")
	switch strings.ToLower(scheme) {
	case "sqlite", "postgres", "postgresql":
		hint = "; write the scheme in lower case"
	case "sqlite3", "file":
		hint = "; for SQLite write sqlite:PATH"
	case "pg", "pgsql", "psql", "postgre":
		hint = "; for PostgreSQL write postgres://USER:PASSWORD@HOST:5432/DB"
	}
	return "is neither sqlite:PATH nor a postgres:// URL, the two databases this build supports" + hint + notShown
}

// checkProxy checks webhook.proxy and its credentials. The URL is never
// quoted back: a mistaken one may hold a password.
func (c *Config) checkProxy(v checker) {
	w := c.Webhook
	proxy, user := v.key("webhook.proxy"), v.key("webhook.proxy_username")
	const how = "give it as http://HOST:PORT (or https://HOST:PORT), e.g. http://smokescreen.internal:4750"
	if raw := strings.TrimSpace(w.Proxy); raw != "" {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			proxy.invalid(" is not a URL (the value is not shown): %s", how)
		case u.User != nil:
			proxy.invalid(" carries a user name or password, which would be shown wherever the setting is (the value is not shown): remove them from the URL and give them as webhook.proxy_username and webhook.proxy_password (FORMS_WEBHOOK_PROXY_USERNAME, FORMS_WEBHOOK_PROXY_PASSWORD)")
		case u.Scheme != "http" && u.Scheme != "https":
			proxy.invalid(" has the scheme %s: the proxy must support HTTP CONNECT; %s", quote(u.Scheme), how)
		case u.Hostname() == "":
			proxy.invalid(" has no host: %s", how)
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			proxy.invalid(" has a path, query or fragment: %s", how)
		default:
			c.Webhook.Proxy = raw
		}
	} else if w.ProxyUsername != "" || w.ProxyPassword != "" {
		v.warn("webhook.proxy_username or webhook.proxy_password is set but webhook.proxy is empty, so webhooks are sent directly and the credentials are not used: set webhook.proxy to the proxy's URL, or remove them")
		return
	}
	if strings.Contains(w.ProxyUsername, ":") {
		user.invalid(" contains a colon, which basic authentication cannot carry in a user name")
	}
	if w.ProxyPassword != "" && w.ProxyUsername == "" {
		// Filed under the user name, which is what is missing.
		user.invalidText("%s is set but webhook.proxy_username is empty: basic authentication needs both; set FORMS_WEBHOOK_PROXY_USERNAME", v.key("webhook.proxy_password"))
	}
}

func hasPassword(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return strings.Contains(u, "@")
	}
	_, has := parsed.User.Password()
	return has || parsed.Query().Has("password")
}

// checkListen returns what is wrong with a listen address, to follow
// "server.listen" in a message.
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("is %s, which is not HOST:PORT: write e.g. 127.0.0.1:8080, or :8080 for every interface", quote(addr))
	}
	n, err := strconv.Atoi(port)
	if port == "" || strings.Trim(port, "0123456789") != "" || err != nil || n > 65535 {
		return fmt.Sprintf("is %s, which has a bad port %s: use a number from 1 to 65535 (0 picks a free port, which only tests want)", quote(addr), quote(port))
	}
	if strings.ContainsAny(host, " \t\r\n/") {
		return fmt.Sprintf("is %s, which has a bad host %s: use an address such as 127.0.0.1 or a host name, or leave it empty for every interface", quote(addr), quote(host))
	}
	return ""
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
