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

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/secretbox"

	"github.com/hymical/hymical/server/telemetry"
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
)

// maxNestingDepth is the most server.max_nesting_depth may be, as the API
// takes it (api.MaxNestingDepthLimit, which this package may not import).
const maxNestingDepth = 1000

// check applies every rule, normalising what it may (log level case, the
// SHA-256 pins). src says where each key's value came from, for messages;
// it may be nil.
func (c *Config) check(r *report, src map[string]string) {
	at := func(key string) string {
		if s := src[key]; s != "" {
			return " (set " + s + ")"
		}
		return ""
	}
	skip := func(keys ...string) bool {
		for _, k := range keys {
			if r.bad[k] {
				return true
			}
		}
		return false
	}

	// database
	if !skip("database.url") {
		if problem := checkDatabaseURL(c.Database.URL.Reveal()); problem != "" {
			r.invalid("database.url", "database.url%s %s", at("database.url"), problem)
		}
	}

	// secrets
	if !skip("secrets.key", "secrets.key_file") {
		key := c.Secrets.Key.Reveal()
		switch {
		case key != "" && c.Secrets.KeyFile != "":
			r.invalid("secrets.key", "secrets.key%s and secrets.key_file%s are both set: give the key one way only", at("secrets.key"), at("secrets.key_file"))
		case key != "":
			if _, err := secretbox.ParseKey(key); err != nil {
				r.invalid("secrets.key", "secrets.key%s is not a 32-byte key in base64 or hex (%v): make one with openssl rand -base64 32 (the value is not shown)", at("secrets.key"), err)
			}
		case c.Secrets.KeyFile != "" && strings.TrimSpace(c.Secrets.KeyFile) != c.Secrets.KeyFile:
			r.invalid("secrets.key_file", "secrets.key_file%s begins or ends with white space: remove it", at("secrets.key_file"))
		}
	}

	// server
	if !skip("server.listen") {
		if problem := checkListen(c.Server.Listen); problem != "" {
			r.invalid("server.listen", "server.listen%s %s", at("server.listen"), problem)
		}
	}
	if !skip("server.admin_token", "server.insecure_dev_mode") {
		tok := c.Server.AdminToken.Reveal()
		switch {
		case tok == "" && !c.Server.InsecureDevMode:
			r.invalid("server.admin_token", "server.admin_token is not set: set FORMS_SERVER_ADMIN_TOKEN to a random string of at least %d characters (e.g. the output of openssl rand -hex 32), or set server.insecure_dev_mode=true on a development machine", MinAdminTokenLength)
		case tok != "" && strings.TrimSpace(tok) != tok:
			r.invalid("server.admin_token", "server.admin_token%s begins or ends with white space, most likely a stray newline: remove it (the value is not shown)", at("server.admin_token"))
		case tok != "" && utf8.RuneCountInString(tok) < MinAdminTokenLength:
			r.invalid("server.admin_token", "server.admin_token%s is shorter than %d characters: use a long random string, e.g. the output of openssl rand -hex 32 (the value is not shown)", at("server.admin_token"), MinAdminTokenLength)
		}
	}
	if !skip("server.ingest_keys") {
		for i, key := range c.Server.IngestKeys {
			s := key.Reveal()
			switch {
			case s == "":
				r.invalid("server.ingest_keys", "server.ingest_keys%s: item %d is empty: remove it or give it a value", at("server.ingest_keys"), i+1)
			case strings.TrimSpace(s) != s:
				r.invalid("server.ingest_keys", "server.ingest_keys%s: item %d begins or ends with white space: remove it (the value is not shown)", at("server.ingest_keys"), i+1)
			case s == c.Server.AdminToken.Reveal():
				r.invalid("server.ingest_keys", "server.ingest_keys%s: item %d is the same as server.admin_token: ingest keys are handed to form front ends, so give them values of their own", at("server.ingest_keys"), i+1)
			}
		}
	}
	if c.Server.InsecureDevMode && !skip("server.insecure_dev_mode", "server.listen") {
		// Dev mode answers anyone without a token, so it may only be
		// reachable from this machine: a refusal, not a warning.
		if !isLoopback(c.Server.Listen) {
			port := "8080"
			if _, p, err := net.SplitHostPort(c.Server.Listen); err == nil && p != "" {
				port = p
			}
			r.invalid("server.insecure_dev_mode", "server.insecure_dev_mode is true but server.listen%s is %s, which other machines can reach, and dev mode lets anyone in without a token: listen on loopback (127.0.0.1:%s, [::1]:%s or localhost:%s), or turn server.insecure_dev_mode off and set FORMS_SERVER_ADMIN_TOKEN",
				at("server.listen"), quote(c.Server.Listen), port, port, port)
		} else {
			r.warn("INSECURE: server.insecure_dev_mode is true, so the API lets callers in without the admin token: use it only on a development machine, never in production")
		}
	}
	for _, key := range []string{"server.admin_token", "server.ingest_keys", "secrets.key", "webhook.proxy_password"} {
		if strings.HasPrefix(src[key], "by --") {
			r.warn("%s was given as a flag: other users of this machine can read it in the process list; use %s or the config file", key, envName(key))
		}
	}
	if strings.HasPrefix(src["database.url"], "by --") && hasPassword(c.Database.URL.Reveal()) {
		r.warn("database.url was given as a flag with a password in it: other users of this machine can read it in the process list; use FORMS_DATABASE_URL or the config file")
	}
	if !skip("server.max_body_bytes") && c.Server.MaxBodyBytes < 1 {
		r.invalid("server.max_body_bytes", "server.max_body_bytes%s is %d: it must be a positive number of bytes (the default is %d, 1 MiB)", at("server.max_body_bytes"), c.Server.MaxBodyBytes, Default().Server.MaxBodyBytes)
	}
	if !skip("server.max_nesting_depth") && (c.Server.MaxNestingDepth < 1 || c.Server.MaxNestingDepth > maxNestingDepth) {
		r.invalid("server.max_nesting_depth", "server.max_nesting_depth%s is %d: it must be from 1 to %d levels (the default is %d)", at("server.max_nesting_depth"), c.Server.MaxNestingDepth, maxNestingDepth, Default().Server.MaxNestingDepth)
	}
	positiveDuration(r, "server.secret_rotation_grace", at, c.Server.SecretRotationGrace, Default().Server.SecretRotationGrace)
	positiveDuration(r, "server.read_header_timeout", at, c.Server.ReadHeaderTimeout, Default().Server.ReadHeaderTimeout)
	positiveDuration(r, "server.read_timeout", at, c.Server.ReadTimeout, Default().Server.ReadTimeout)
	positiveDuration(r, "server.write_timeout", at, c.Server.WriteTimeout, Default().Server.WriteTimeout)
	positiveDuration(r, "server.idle_timeout", at, c.Server.IdleTimeout, Default().Server.IdleTimeout)
	if !skip("server.max_header_bytes") && c.Server.MaxHeaderBytes < 4096 {
		r.invalid("server.max_header_bytes", "server.max_header_bytes%s is %d: it must be at least 4096 bytes (the default is %d, 64 KiB)", at("server.max_header_bytes"), c.Server.MaxHeaderBytes, Default().Server.MaxHeaderBytes)
	}
	boundedInt(r, "server.auth_failures", at, c.Server.AuthFailures, Default().Server.AuthFailures, maxAuthFailures)
	positiveDuration(r, "server.auth_failure_window", at, c.Server.AuthFailureWindow, Default().Server.AuthFailureWindow)
	boundedInt(r, "server.auth_failure_clients", at, c.Server.AuthFailureClients, Default().Server.AuthFailureClients, maxAuthFailureClients)

	// worker
	d := Default()
	boundedInt(r, "worker.lease_seconds", at, c.Workers.LeaseSeconds, d.Workers.LeaseSeconds, maxLeaseSeconds)
	boundedInt(r, "worker.concurrency", at, c.Workers.Concurrency, d.Workers.Concurrency, maxConcurrency)
	boundedInt(r, "worker.batch_size", at, c.Workers.BatchSize, d.Workers.BatchSize, maxConcurrency)
	boundedInt(r, "worker.max_attempts", at, c.Workers.MaxAttempts, d.Workers.MaxAttempts, 0)
	positiveDuration(r, "worker.poll_interval", at, c.Workers.PollInterval, d.Workers.PollInterval)
	if !skip("worker.retry_delays") {
		if len(c.Workers.RetryDelays) == 0 {
			r.invalid("worker.retry_delays", "worker.retry_delays%s is empty: give at least one delay, e.g. 30s,2m,10m,1h", at("worker.retry_delays"))
		}
		for i, delay := range c.Workers.RetryDelays {
			if delay <= 0 {
				r.invalid("worker.retry_delays", "worker.retry_delays%s: item %d is %s: every delay must be positive, e.g. 30s", at("worker.retry_delays"), i+1, formatDuration(delay))
			}
		}
	}
	if s := c.Workers.EndpointShare; !skip("worker.endpoint_share") && !(s > 0 && s <= 1) {
		r.invalid("worker.endpoint_share", "worker.endpoint_share%s is %s: it must be more than 0 and at most 1 (0.25 lets one endpoint hold a quarter of the senders while others wait; 1 turns the share off)", at("worker.endpoint_share"), strconv.FormatFloat(s, 'g', -1, 64))
	}
	if j := c.Workers.RetryJitter; !skip("worker.retry_jitter") && (j < 0 || j >= 1) {
		r.invalid("worker.retry_jitter", "worker.retry_jitter%s is %s: it must be at least 0 and less than 1 (0.2 spreads each delay by ±20%%)", at("worker.retry_jitter"), strconv.FormatFloat(j, 'g', -1, 64))
	}
	if !skip("worker.max_retry_after") && c.Workers.MaxRetryAfter < 0 {
		r.invalid("worker.max_retry_after", "worker.max_retry_after%s is %s: it must not be negative (0 ignores Retry-After; the default is %s)", at("worker.max_retry_after"), formatDuration(c.Workers.MaxRetryAfter), formatDuration(d.Workers.MaxRetryAfter))
	}

	// webhook
	boundedInt(r, "webhook.connect_timeout_seconds", at, c.Webhook.ConnectTimeoutSeconds, d.Webhook.ConnectTimeoutSeconds, maxTimeoutSeconds)
	boundedInt(r, "webhook.read_timeout_seconds", at, c.Webhook.ReadTimeoutSeconds, d.Webhook.ReadTimeoutSeconds, maxTimeoutSeconds)
	if !skip("webhook.allowed_networks") {
		for _, p := range c.Webhook.AllowedNetworks {
			if p.Bits() == 0 {
				r.warn("webhook.allowed_networks contains %s, which allows every address: endpoints can then reach this server's own network and cloud metadata services; list only the networks of receivers you trust", p)
			}
		}
	}
	c.checkProxy(r, at)

	// The product's rule: the lease must comfortably outlast the timeouts,
	// or a delivery still in flight is claimed and sent again by another
	// worker. The worker itself refuses a lease that does not cover the
	// whole send deadline (the timeouts plus PluginHopMargin), so that is
	// where refusal starts; below twice the timeouts is allowed, with a
	// warning.
	if !skip("worker.lease_seconds", "webhook.connect_timeout_seconds", "webhook.read_timeout_seconds") {
		lease, conn, read := c.Workers.LeaseSeconds, c.Webhook.ConnectTimeoutSeconds, c.Webhook.ReadTimeoutSeconds
		sum := conn + read
		margin := int(PluginHopMargin / time.Second)
		advice := max(2*sum, sum+margin+1)
		switch {
		case lease <= sum+margin:
			r.invalid("worker.lease_seconds", "worker.lease_seconds (%d) must comfortably outlast webhook.connect_timeout_seconds + webhook.read_timeout_seconds (%d + %d = %d s; with the %d s plugin margin a send may take %d s): a delivery still in flight when its lease ends is claimed and sent again by another worker. Raise worker.lease_seconds to %d or more, or lower the timeouts",
				lease, conn, read, sum, margin, sum+margin, advice)
		case lease < 2*sum:
			r.warn("worker.lease_seconds (%d) is less than twice webhook.connect_timeout_seconds + webhook.read_timeout_seconds (%d s): a slow receiver or a paused process can outlast the lease and get a delivery sent twice; %d or more keeps the margin the defaults have",
				lease, sum, advice)
		}
	}

	// plugins
	if !skip("plugins.dir") && strings.TrimSpace(c.Plugins.Dir) != c.Plugins.Dir {
		r.invalid("plugins.dir", "plugins.dir%s %s begins or ends with white space: remove it", at("plugins.dir"), quote(c.Plugins.Dir))
	}
	positiveDuration(r, "plugins.send_grace", at, c.Plugins.SendGrace, d.Plugins.SendGrace)
	positiveDuration(r, "plugins.start_timeout", at, c.Plugins.StartTimeout, d.Plugins.StartTimeout)
	positiveDuration(r, "plugins.validate_timeout", at, c.Plugins.ValidateTimeout, d.Plugins.ValidateTimeout)
	if !skip("plugins.list") {
		c.checkPlugins(r)
	}

	// console
	if !skip("console.trace_url_template") {
		if _, err := telemetry.ParseTraceURLTemplate(c.Console.TraceURLTemplate); err != nil {
			r.invalid("console.trace_url_template", "console.trace_url_template%s %s %v", at("console.trace_url_template"), quote(c.Console.TraceURLTemplate), err)
		}
	}
	positiveDuration(r, "console.session_ttl", at, c.Console.SessionTTL, d.Console.SessionTTL)

	// telemetry
	c.checkTelemetry(r, at)
	c.checkRetention(r, at)
	c.checkEndpoints(r, at)

	// log
	if !skip("log.level") {
		c.Log.Level = strings.ToLower(strings.TrimSpace(c.Log.Level))
		switch c.Log.Level {
		case "debug", "info", "warn", "error":
		default:
			r.invalid("log.level", "log.level%s is %s: use debug, info, warn or error", at("log.level"), quote(c.Log.Level))
		}
	}
	if !skip("log.format") {
		c.Log.Format = strings.ToLower(strings.TrimSpace(c.Log.Format))
		switch c.Log.Format {
		case "text", "json":
		default:
			r.invalid("log.format", "log.format%s is %s: use text or json", at("log.format"), quote(c.Log.Format))
		}
	}
}

// checkRetention checks the retention section. A very short age is
// refused: it would remove the history operators look at and the events
// idempotency keys are checked against almost as soon as they exist.
func (c *Config) checkRetention(r *report, at func(string) string) {
	rc := c.Retention
	if !r.bad["retention.delivered_max_age"] && rc.DeliveredMaxAge != 0 && rc.DeliveredMaxAge < MinRetention {
		r.invalid("retention.delivered_max_age", "retention.delivered_max_age%s is %s: use 0 to keep everything, or at least %s, e.g. 720h for 30 days",
			at("retention.delivered_max_age"), formatDuration(rc.DeliveredMaxAge), formatDuration(MinRetention))
	}
	if !r.bad["retention.interval"] && rc.Interval <= 0 {
		r.invalid("retention.interval", "retention.interval%s is %s: it must be positive, e.g. 10m", at("retention.interval"), formatDuration(rc.Interval))
	}
}

// checkEndpoints checks the endpoints section.
func (c *Config) checkEndpoints(r *report, at func(string) string) {
	ec, d := c.Endpoints, Default().Endpoints
	if !r.bad["endpoints.disable_after_failing"] && ec.DisableAfterFailing != 0 && ec.DisableAfterFailing < time.Minute {
		r.invalid("endpoints.disable_after_failing", "endpoints.disable_after_failing%s is %s: use 0 to never disable for failing, or at least 1m, e.g. 120h",
			at("endpoints.disable_after_failing"), formatDuration(ec.DisableAfterFailing))
	}
	positiveDuration(r, "endpoints.health_interval", at, ec.HealthInterval, d.HealthInterval)
	if id := ec.OperatorEndpoint; !r.bad["endpoints.operator_endpoint"] && id != "" && (strings.TrimSpace(id) != id || !strings.HasPrefix(id, "ep_")) {
		r.invalid("endpoints.operator_endpoint", "endpoints.operator_endpoint%s %s is not an endpoint id: give the id the API answered when the endpoint was created, ep_ followed by 32 hex digits",
			at("endpoints.operator_endpoint"), quote(id))
	}
	if !r.bad["endpoints.operator_endpoint"] && ec.OperatorEndpoint != "" && !ec.DisableOnGone && ec.DisableAfterFailing == 0 {
		r.warn("endpoints.operator_endpoint is set but endpoint health is off (endpoints.disable_on_gone false, endpoints.disable_after_failing 0): the server never disables an endpoint on its own, so the operator endpoint is never told anything; turn one of them on, or leave operator_endpoint empty")
	}
	positiveDuration(r, "endpoints.retry_min_delay", at, ec.RetryMinDelay, d.RetryMinDelay)
	positiveDuration(r, "endpoints.retry_max_delay", at, ec.RetryMaxDelay, d.RetryMaxDelay)
	if !r.bad["endpoints.retry_min_delay"] && !r.bad["endpoints.retry_max_delay"] && ec.RetryMaxDelay < ec.RetryMinDelay {
		r.invalid("endpoints.retry_max_delay", "endpoints.retry_max_delay%s (%s) is shorter than endpoints.retry_min_delay (%s): the longest delay allowed must be at least the shortest",
			at("endpoints.retry_max_delay"), formatDuration(ec.RetryMaxDelay), formatDuration(ec.RetryMinDelay))
	}
	if !r.bad["endpoints.retry_max_attempts"] && (ec.RetryMaxAttempts < 2 || ec.RetryMaxAttempts > storage.MaxRetrySchedule+1) {
		r.invalid("endpoints.retry_max_attempts", "endpoints.retry_max_attempts%s is %d: it must be between 2 and %d (the default is %d)",
			at("endpoints.retry_max_attempts"), ec.RetryMaxAttempts, storage.MaxRetrySchedule+1, d.RetryMaxAttempts)
	}
}

// MinRetention is the shortest retention.delivered_max_age accepted.
const MinRetention = time.Hour

// checkTelemetry checks the telemetry section, normalising the exporter's
// case.
func (c *Config) checkTelemetry(r *report, at func(string) string) {
	t := &c.Telemetry
	exporterOK := !r.bad["telemetry.exporter"]
	if exporterOK {
		t.Exporter = strings.ToLower(strings.TrimSpace(t.Exporter))
		if t.Exporter == "" {
			t.Exporter = string(telemetry.ExporterNone)
		}
		if !telemetry.Exporter(t.Exporter).Valid() {
			r.invalid("telemetry.exporter", "telemetry.exporter%s is %s: use none, otlp-grpc, otlp-http or stdout", at("telemetry.exporter"), quote(t.Exporter))
			exporterOK = false
		}
	}
	exp := telemetry.Exporter(t.Exporter)
	if exporterOK && !r.bad["telemetry.endpoint"] && !r.bad["telemetry.insecure"] {
		switch {
		case t.Endpoint != "" && !exp.OTLP():
			r.warn("telemetry.endpoint is set but telemetry.exporter is %s, which sends nothing to it; set telemetry.exporter to otlp-grpc or otlp-http", t.Exporter)
		case exp.OTLP():
			if _, err := telemetry.EndpointURL(exp, t.Endpoint, t.Insecure); err != nil {
				r.invalid("telemetry.endpoint", "telemetry.endpoint%s: %v", at("telemetry.endpoint"), err)
			}
		}
	}
	if !r.bad["telemetry.service_name"] {
		switch name := t.ServiceName; {
		case strings.TrimSpace(name) == "":
			r.invalid("telemetry.service_name", "telemetry.service_name%s is empty: name the service, e.g. %s (the default)", at("telemetry.service_name"), telemetry.DefaultServiceName)
		case strings.TrimSpace(name) != name:
			r.invalid("telemetry.service_name", "telemetry.service_name%s %s begins or ends with white space: remove it", at("telemetry.service_name"), quote(name))
		}
	}
	if !r.bad["telemetry.resource_attributes"] {
		seen := map[string]int{}
		for i, kv := range t.ResourceAttributes {
			k, _, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			switch {
			case !ok || k == "":
				r.invalid("telemetry.resource_attributes", "telemetry.resource_attributes%s: item %d is %s, not key=value: write it as e.g. deployment.environment=production", at("telemetry.resource_attributes"), i+1, quote(kv))
				continue
			case strings.ContainsAny(k, ", \t"):
				r.invalid("telemetry.resource_attributes", "telemetry.resource_attributes%s: item %d has the key %s, which contains a comma or white space: use a dotted name such as team.name", at("telemetry.resource_attributes"), i+1, quote(k))
				continue
			case k == "service.name":
				r.invalid("telemetry.resource_attributes", "telemetry.resource_attributes%s: item %d sets service.name: set telemetry.service_name instead", at("telemetry.resource_attributes"), i+1)
				continue
			}
			if j, dup := seen[k]; dup {
				r.invalid("telemetry.resource_attributes", "telemetry.resource_attributes%s: items %d and %d both set %s: keep one", at("telemetry.resource_attributes"), j+1, i+1, k)
			}
			seen[k] = i
		}
	}
	if t.MetricsPublic && !t.Metrics {
		r.warn("telemetry.metrics_public is true but telemetry.metrics is false, so there is no /metrics to make public; set telemetry.metrics=true or drop metrics_public")
	}
}

// checkPlugins checks plugins.list entry by entry.
func (c *Config) checkPlugins(r *report) {
	seen := map[string]int{}
	reserved := map[string]string{
		settingConnectTimeout:  "webhook.connect_timeout_seconds",
		settingReadTimeout:     "webhook.read_timeout_seconds",
		settingAllowedNetworks: "webhook.allowed_networks",
		settingProxy:           "webhook.proxy",
		settingProxyUsername:   "webhook.proxy_username",
		settingProxyPassword:   "webhook.proxy_password",
	}
	for i := range c.Plugins.List {
		p := &c.Plugins.List[i]
		key := fmt.Sprintf("plugins.list[%d]", i)
		if !validPluginName(p.Name) {
			r.invalid(key+".name", "%s.name %s is not a plugin name: use lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63 in all", key, quote(p.Name))
			continue
		}
		if j, dup := seen[p.Name]; dup {
			r.invalid(key+".name", "%s.name: plugin %s is already configured by plugins.list[%d]: keep one entry", key, p.Name, j)
		}
		seen[p.Name] = i
		if p.SHA256 != "" {
			sum := strings.ToLower(strings.TrimSpace(p.SHA256))
			if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
				r.invalid(key+".sha256", "%s.sha256 (plugin %s) is not a SHA-256 sum: give the 64 hex digits that sha256sum prints for the binary, taken from a trusted source", key, p.Name)
			} else {
				p.SHA256 = sum
			}
		}
		if strings.TrimSpace(p.Path) != p.Path {
			r.invalid(key+".path", "%s.path (plugin %s) begins or ends with white space: remove it", key, p.Name)
		}
		if p.Name == HTTPPlugin {
			for _, name := range []string{settingConnectTimeout, settingReadTimeout, settingAllowedNetworks,
				settingProxy, settingProxyUsername, settingProxyPassword} {
				if _, ok := p.Settings[name]; ok {
					why := "so that the lease check sees it"
					if strings.HasPrefix(name, settingProxy) {
						why = "where it is checked and its password kept out of every display"
					}
					r.invalid(key+".settings."+name, "%s.settings.%s: the http plugin's %s comes from %s, %s: set that instead and remove this setting", key, name, name, reserved[name], why)
				}
			}
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

func boundedInt(r *report, key string, at func(string) string, n, def, upper int) {
	if r.bad[key] {
		return
	}
	switch {
	case n < 1:
		r.invalid(key, "%s%s is %d: it must be at least 1 (the default is %d)", key, at(key), n, def)
	case upper > 0 && n > upper:
		r.invalid(key, "%s%s is %d: it must be at most %d (the default is %d)", key, at(key), n, upper, def)
	}
}

func positiveDuration(r *report, key string, at func(string) string, d, def time.Duration) {
	if !r.bad[key] && d <= 0 {
		r.invalid(key, "%s%s is %s: it must be a positive duration such as %s (the default)", key, at(key), formatDuration(d), formatDuration(def))
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
func (c *Config) checkProxy(r *report, at func(string) string) {
	w := c.Webhook
	const how = "give it as http://HOST:PORT (or https://HOST:PORT), e.g. http://smokescreen.internal:4750"
	if raw := strings.TrimSpace(w.Proxy); raw != "" {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			r.invalid("webhook.proxy", "webhook.proxy%s is not a URL (the value is not shown): %s", at("webhook.proxy"), how)
		case u.User != nil:
			r.invalid("webhook.proxy", "webhook.proxy%s carries a user name or password, which would be shown wherever the setting is (the value is not shown): remove them from the URL and give them as webhook.proxy_username and webhook.proxy_password (FORMS_WEBHOOK_PROXY_USERNAME, FORMS_WEBHOOK_PROXY_PASSWORD)", at("webhook.proxy"))
		case u.Scheme != "http" && u.Scheme != "https":
			r.invalid("webhook.proxy", "webhook.proxy%s has the scheme %s: the proxy must support HTTP CONNECT; %s", at("webhook.proxy"), quote(u.Scheme), how)
		case u.Hostname() == "":
			r.invalid("webhook.proxy", "webhook.proxy%s has no host: %s", at("webhook.proxy"), how)
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			r.invalid("webhook.proxy", "webhook.proxy%s has a path, query or fragment: %s", at("webhook.proxy"), how)
		default:
			c.Webhook.Proxy = raw
		}
	} else if w.ProxyUsername != "" || w.ProxyPassword != "" {
		r.warn("webhook.proxy_username or webhook.proxy_password is set but webhook.proxy is empty, so webhooks are sent directly and the credentials are not used: set webhook.proxy to the proxy's URL, or remove them")
		return
	}
	if strings.Contains(w.ProxyUsername, ":") {
		r.invalid("webhook.proxy_username", "webhook.proxy_username%s contains a colon, which basic authentication cannot carry in a user name", at("webhook.proxy_username"))
	}
	if w.ProxyPassword != "" && w.ProxyUsername == "" {
		r.invalid("webhook.proxy_username", "webhook.proxy_password%s is set but webhook.proxy_username is empty: basic authentication needs both; set FORMS_WEBHOOK_PROXY_USERNAME", at("webhook.proxy_password"))
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
