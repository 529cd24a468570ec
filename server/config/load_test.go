package config_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/faceopts"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, warnings := mustLoad(t, "", withToken())
	if len(warnings) != 0 {
		t.Errorf("warnings for the defaults: %q", warnings)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	tests := []struct {
		key       string
		got, want any
	}{
		{"database.url", cfg.Database.URL.Reveal(), "sqlite:hymical.db"},
		{"server.listen", cfg.Server.Listen, "127.0.0.1:8080"},
		{"server.ingest_keys", len(cfg.Server.IngestKeys), 0},
		{"server.insecure_dev_mode", cfg.Server.InsecureDevMode, false},
		{"server.max_body_bytes", cfg.Server.MaxBodyBytes, int64(1 << 20)},
		{"server.max_nesting_depth", cfg.Server.MaxNestingDepth, 64},
		{"server.secret_rotation_grace", cfg.Server.SecretRotationGrace, 24 * time.Hour},
		{"server.read_header_timeout", cfg.Server.ReadHeaderTimeout, 10 * time.Second},
		{"server.read_timeout", cfg.Server.ReadTimeout, 30 * time.Second},
		{"server.write_timeout", cfg.Server.WriteTimeout, 60 * time.Second},
		{"server.idle_timeout", cfg.Server.IdleTimeout, 60 * time.Second},
		{"server.max_header_bytes", cfg.Server.MaxHeaderBytes, 65536},
		{"server.max_connections", cfg.Server.MaxConnections, 0},
		{"server.max_connections_per_address", cfg.Server.MaxConnectionsPerAddress, 0},
		{"server.auth_failures", cfg.Server.AuthFailures, 10},
		{"server.auth_failure_window", cfg.Server.AuthFailureWindow, 5 * time.Minute},
		{"server.auth_failure_clients", cfg.Server.AuthFailureClients, 10000},
		{"worker.lease_seconds", cfg.Workers.LeaseSeconds, 60},
		{"worker.concurrency", cfg.Workers.Concurrency, 16},
		{"worker.batch_size", cfg.Workers.BatchSize, 64},
		{"worker.poll_interval", cfg.Workers.PollInterval, 2 * time.Second},
		{"worker.max_attempts", cfg.Workers.MaxAttempts, 5},
		{"worker.retry_delays", cfg.Workers.RetryDelays, []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}},
		{"worker.retry_jitter", cfg.Workers.RetryJitter, 0.2},
		{"worker.endpoint_share", cfg.Workers.EndpointShare, 0.25},
		{"worker.max_retry_after", cfg.Workers.MaxRetryAfter, time.Hour},
		{"webhook.connect_timeout_seconds", cfg.Webhook.ConnectTimeoutSeconds, 5},
		{"webhook.read_timeout_seconds", cfg.Webhook.ReadTimeoutSeconds, 10},
		{"webhook.allowed_networks", len(cfg.Webhook.AllowedNetworks), 0},
		{"plugins.dir", cfg.Plugins.Dir, filepath.Dir(exe)},
		{"plugins.send_grace", cfg.Plugins.SendGrace, 2 * time.Second},
		{"plugins.start_timeout", cfg.Plugins.StartTimeout, 10 * time.Second},
		{"plugins.validate_timeout", cfg.Plugins.ValidateTimeout, 10 * time.Second},
		{"plugins.list", len(cfg.Plugins.List), 0},
		{"log.level", cfg.Log.Level, "info"},
		{"log.format", cfg.Log.Format, "text"},
		{"telemetry.exporter", cfg.Telemetry.Exporter, "none"},
		{"telemetry.endpoint", cfg.Telemetry.Endpoint, ""},
		{"telemetry.insecure", cfg.Telemetry.Insecure, false},
		{"telemetry.service_name", cfg.Telemetry.ServiceName, "hymical"},
		{"telemetry.resource_attributes", len(cfg.Telemetry.ResourceAttributes), 0},
		{"telemetry.metrics", cfg.Telemetry.Metrics, false},
		{"telemetry.metrics_public", cfg.Telemetry.MetricsPublic, false},
		// Endpoint health is opt-in, so that with the defaults every
		// sentence of the delivery-semantics page holds.
		{"endpoints.disable_on_gone", cfg.Endpoints.DisableOnGone, false},
		{"endpoints.disable_after_failing", cfg.Endpoints.DisableAfterFailing, time.Duration(0)},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.key, tt.got, tt.want)
		}
	}
}

// samples are a valid non-default value for every key that has a variable
// and a flag, as text, with what it must load as.
var samples = []struct {
	key   string
	text  string
	check func(config.Config) bool
}{
	{"database.url", "postgres://hymical@db.internal:5432/hymical", func(c config.Config) bool {
		return c.Database.URL.Reveal() == "postgres://hymical@db.internal:5432/hymical"
	}},
	{"secrets.key", secretsKey, func(c config.Config) bool { return c.Secrets.Key.Reveal() == secretsKey }},
	{"secrets.key_file", "/etc/hymical/secrets.key", func(c config.Config) bool { return c.Secrets.KeyFile == "/etc/hymical/secrets.key" }},
	{"server.listen", ":9090", func(c config.Config) bool { return c.Server.Listen == ":9090" }},
	{"server.admin_token", "another-admin-token-0123456789", func(c config.Config) bool {
		return c.Server.AdminToken.Reveal() == "another-admin-token-0123456789"
	}},
	{"server.ingest_keys", "ingest-one, ingest-two", func(c config.Config) bool {
		return len(c.Server.IngestKeys) == 2 && c.Server.IngestKeys[0].Reveal() == "ingest-one" && c.Server.IngestKeys[1].Reveal() == "ingest-two"
	}},
	{"server.insecure_dev_mode", "true", func(c config.Config) bool { return c.Server.InsecureDevMode }},
	{"server.max_body_bytes", "2048", func(c config.Config) bool { return c.Server.MaxBodyBytes == 2048 }},
	{"server.max_nesting_depth", "100", func(c config.Config) bool { return c.Server.MaxNestingDepth == 100 }},
	{"server.secret_rotation_grace", "36h", func(c config.Config) bool { return c.Server.SecretRotationGrace == 36*time.Hour }},
	{"server.read_header_timeout", "3s", func(c config.Config) bool { return c.Server.ReadHeaderTimeout == 3*time.Second }},
	{"server.read_timeout", "5s", func(c config.Config) bool { return c.Server.ReadTimeout == 5*time.Second }},
	{"server.write_timeout", "45s", func(c config.Config) bool { return c.Server.WriteTimeout == 45*time.Second }},
	{"server.idle_timeout", "2m", func(c config.Config) bool { return c.Server.IdleTimeout == 2*time.Minute }},
	{"server.max_header_bytes", "8192", func(c config.Config) bool { return c.Server.MaxHeaderBytes == 8192 }},
	{"server.max_connections", "500", func(c config.Config) bool { return c.Server.MaxConnections == 500 }},
	{"server.max_connections_per_address", "300", func(c config.Config) bool { return c.Server.MaxConnectionsPerAddress == 300 }},
	{"server.auth_failures", "20", func(c config.Config) bool { return c.Server.AuthFailures == 20 }},
	{"server.auth_failure_window", "15m", func(c config.Config) bool { return c.Server.AuthFailureWindow == 15*time.Minute }},
	{"server.auth_failure_clients", "50000", func(c config.Config) bool { return c.Server.AuthFailureClients == 50000 }},
	{"worker.lease_seconds", "90", func(c config.Config) bool { return c.Workers.LeaseSeconds == 90 }},
	{"worker.concurrency", "4", func(c config.Config) bool { return c.Workers.Concurrency == 4 }},
	{"worker.batch_size", "8", func(c config.Config) bool { return c.Workers.BatchSize == 8 }},
	{"worker.poll_interval", "2s", func(c config.Config) bool { return c.Workers.PollInterval == 2*time.Second }},
	{"worker.max_attempts", "9", func(c config.Config) bool { return c.Workers.MaxAttempts == 9 }},
	{"worker.retry_delays", "1s, 5s ,1m", func(c config.Config) bool {
		return slices.Equal(c.Workers.RetryDelays, []time.Duration{time.Second, 5 * time.Second, time.Minute})
	}},
	{"worker.retry_jitter", "0.5", func(c config.Config) bool { return c.Workers.RetryJitter == 0.5 }},
	{"worker.endpoint_share", "0.5", func(c config.Config) bool { return c.Workers.EndpointShare == 0.5 }},
	{"worker.max_retry_after", "0s", func(c config.Config) bool { return c.Workers.MaxRetryAfter == 0 }},
	{"webhook.connect_timeout_seconds", "7", func(c config.Config) bool { return c.Webhook.ConnectTimeoutSeconds == 7 }},
	{"webhook.read_timeout_seconds", "20", func(c config.Config) bool { return c.Webhook.ReadTimeoutSeconds == 20 }},
	{"webhook.allowed_networks", "10.0.0.0/8,127.0.0.1,fd00::/8", func(c config.Config) bool {
		want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("fd00::/8")}
		return slices.Equal(c.Webhook.AllowedNetworks, want)
	}},
	{"server.tls_cert_file", "/etc/hymical/cert.pem", func(c config.Config) bool { return c.Server.TLSCertFile == "/etc/hymical/cert.pem" }},
	{"server.tls_key_file", "/etc/hymical/key.pem", func(c config.Config) bool { return c.Server.TLSKeyFile == "/etc/hymical/key.pem" }},
	{"server.trusted_proxies", "10.0.0.0/8, 192.0.2.1,fd00::/8", func(c config.Config) bool {
		want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("fd00::/8")}
		return slices.Equal(c.Server.TrustedProxies, want)
	}},
	{"webhook.proxy", "http://smokescreen.internal:4750", func(c config.Config) bool { return c.Webhook.Proxy == "http://smokescreen.internal:4750" }},
	{"webhook.proxy_username", "hymical", func(c config.Config) bool { return c.Webhook.ProxyUsername == "hymical" }},
	{"webhook.proxy_password", "egress-pass", func(c config.Config) bool { return c.Webhook.ProxyPassword.Reveal() == "egress-pass" }},
	{"plugins.dir", "/opt/hymical/plugins", func(c config.Config) bool { return c.Plugins.Dir == "/opt/hymical/plugins" }},
	{"plugins.send_grace", "3s", func(c config.Config) bool { return c.Plugins.SendGrace == 3*time.Second }},
	{"plugins.start_timeout", "1m", func(c config.Config) bool { return c.Plugins.StartTimeout == time.Minute }},
	{"plugins.validate_timeout", "3s", func(c config.Config) bool { return c.Plugins.ValidateTimeout == 3*time.Second }},
	{"log.level", "DEBUG", func(c config.Config) bool { return c.Log.Level == "debug" }},
	{"log.format", "json", func(c config.Config) bool { return c.Log.Format == "json" }},
	{"retention.delivered_max_age", "168h", func(c config.Config) bool { return c.Retention.DeliveredMaxAge == 168*time.Hour }},
	{"retention.interval", "1m", func(c config.Config) bool { return c.Retention.Interval == time.Minute }},
	{"endpoints.disable_on_gone", "true", func(c config.Config) bool { return c.Endpoints.DisableOnGone }},
	{"endpoints.disable_after_failing", "48h", func(c config.Config) bool { return c.Endpoints.DisableAfterFailing == 48*time.Hour }},
	{"endpoints.health_interval", "30s", func(c config.Config) bool { return c.Endpoints.HealthInterval == 30*time.Second }},
	{"endpoints.operator_endpoint", "ep_0123456789abcdef0123456789abcdef", func(c config.Config) bool {
		return c.Endpoints.OperatorEndpoint == "ep_0123456789abcdef0123456789abcdef"
	}},
	{"endpoints.retry_min_delay", "5s", func(c config.Config) bool { return c.Endpoints.RetryMinDelay == 5*time.Second }},
	{"endpoints.retry_max_delay", "6h", func(c config.Config) bool { return c.Endpoints.RetryMaxDelay == 6*time.Hour }},
	{"endpoints.retry_max_attempts", "9", func(c config.Config) bool { return c.Endpoints.RetryMaxAttempts == 9 }},
	{"telemetry.exporter", "OTLP-gRPC", func(c config.Config) bool { return c.Telemetry.Exporter == "otlp-grpc" }},
	{"telemetry.endpoint", "collector.internal:4317", func(c config.Config) bool { return c.Telemetry.Endpoint == "collector.internal:4317" }},
	{"telemetry.insecure", "true", func(c config.Config) bool { return c.Telemetry.Insecure }},
	{"telemetry.service_name", "forms-delivery", func(c config.Config) bool { return c.Telemetry.ServiceName == "forms-delivery" }},
	{"telemetry.resource_attributes", "deployment.environment=production, team=forms", func(c config.Config) bool {
		return slices.Equal(c.Telemetry.ResourceAttributes, []string{"deployment.environment=production", "team=forms"})
	}},
	{"telemetry.metrics", "true", func(c config.Config) bool { return c.Telemetry.Metrics }},
	{"telemetry.metrics_public", "false", func(c config.Config) bool { return !c.Telemetry.MetricsPublic }},
	{"console.enabled", "false", func(c config.Config) bool { return !c.Console.Enabled }},
	{"console.trace_url_template", "https://tempo.example.com/t/{trace_id}?x=1", func(c config.Config) bool {
		return c.Console.TraceURLTemplate == "https://tempo.example.com/t/{trace_id}?x=1"
	}},
	{"console.session_ttl", "90m", func(c config.Config) bool { return c.Console.SessionTTL == 90*time.Minute }},
	{"portal.enabled", "false", func(c config.Config) bool { return !c.Portal.Enabled }},
	{"portal.frame_ancestors", "https://forms.example.com, https://*.example.net:8443", func(c config.Config) bool {
		return slices.Equal(c.Portal.FrameAncestors, []string{"https://forms.example.com", "https://*.example.net:8443"})
	}},
	{"portal.brand_name", "Acme Forms", func(c config.Config) bool { return c.Portal.BrandName == "Acme Forms" }},
	{"portal.accent_color", "#7c3aed", func(c config.Config) bool { return c.Portal.AccentColor == "#7c3aed" }},
}

// TestEveryKeyReadsAlikeFromFileEnvironmentAndFlag sets each key, one at a
// time, through each of the three sources, and wants the same result.
func TestEveryKeyReadsAlikeFromFileEnvironmentAndFlag(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{"plugins.list": true} // file only; TestPluginsList covers it
	for _, s := range samples {
		covered[s.key] = true
		t.Run(s.key, func(t *testing.T) {
			t.Parallel()
			section, name, _ := strings.Cut(s.key, ".")
			yamlText := fmt.Sprintf("%s:\n  %s: %q\n", section, name, s.text)
			if strings.Contains(s.text, ",") {
				// In the file a list is a YAML list.
				var items []string
				for _, it := range strings.Split(s.text, ",") {
					items = append(items, fmt.Sprintf("%q", strings.TrimSpace(it)))
				}
				yamlText = fmt.Sprintf("%s:\n  %s: [%s]\n", section, name, strings.Join(items, ", "))
			}
			base := withToken
			if s.key == "server.admin_token" {
				// The sample is the token; the environment must not beat it.
				base = func(env ...string) []string { return env }
			}
			// The TLS files come in pairs: the other one comes from the
			// environment.
			for key, other := range map[string]string{"server.tls_cert_file": "server.tls_key_file", "server.tls_key_file": "server.tls_cert_file"} {
				if s.key == key {
					base = func(env ...string) []string {
						return withToken(append(env, envName(other)+"=/etc/hymical/other.pem")...)
					}
				}
			}
			sources := map[string]func() (config.Config, []string, error){
				"file": func() (config.Config, []string, error) { return load(t, yamlText, base()) },
				"env":  func() (config.Config, []string, error) { return load(t, "", base(envName(s.key)+"="+s.text)) },
				"flag": func() (config.Config, []string, error) { return load(t, "", base(), "--"+s.key+"="+s.text) },
			}
			var got []config.Config
			for _, src := range []string{"file", "env", "flag"} {
				cfg, _, err := sources[src]()
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				if !s.check(cfg) {
					t.Errorf("%s: %s=%q loaded as %v", src, s.key, s.text, cfg)
				}
				got = append(got, cfg)
			}
			if !reflect.DeepEqual(got[0], got[1]) || !reflect.DeepEqual(got[1], got[2]) {
				t.Errorf("file, env and flag disagree:\n%v\n%v\n%v", got[0], got[1], got[2])
			}
		})
	}
	for _, k := range allKeys {
		if !covered[k] {
			t.Errorf("no sample for %s", k)
		}
	}
}

func TestProductEnvironmentNames(t *testing.T) {
	t.Parallel()
	// The names the product page and the README use.
	cfg, _ := mustLoad(t, "", withToken(
		"FORMS_WORKER_LEASE_SECONDS=120",
		"FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS=3",
		"FORMS_WEBHOOK_READ_TIMEOUT_SECONDS=30",
		"FORMS_DATABASE_URL=sqlite:/tmp/other.db",
		"HOME=/root", "PATH=/usr/bin", "FORMSX_WHATEVER=1", // not ours: ignored
	))
	if cfg.Workers.LeaseSeconds != 120 || cfg.Webhook.ConnectTimeoutSeconds != 3 || cfg.Webhook.ReadTimeoutSeconds != 30 ||
		cfg.Database.URL.Reveal() != "sqlite:/tmp/other.db" {
		t.Errorf("loaded %v", cfg)
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	const file = "worker:\n  lease_seconds: 100\n"
	tests := []struct {
		name string
		file string
		env  []string
		args []string
		want int
	}{
		{"default", "", nil, nil, 60},
		{"file beats default", file, nil, nil, 100},
		{"env beats file", file, []string{"FORMS_WORKER_LEASE_SECONDS=110"}, nil, 110},
		{"flag beats env", file, []string{"FORMS_WORKER_LEASE_SECONDS=110"}, []string{"--worker.lease_seconds=120"}, 120},
		{"flag beats file", file, nil, []string{"--worker.lease_seconds", "120"}, 120},
		{"single-dash flag", "", nil, []string{"-worker.lease_seconds=130"}, 130},
		{"null in the file keeps the default", "worker:\n  lease_seconds: null\n", nil, nil, 60},
		{"empty section keeps the defaults", "worker:\n", nil, nil, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := mustLoad(t, tt.file, withToken(tt.env...), tt.args...)
			if cfg.Workers.LeaseSeconds != tt.want {
				t.Errorf("worker.lease_seconds = %d, want %d", cfg.Workers.LeaseSeconds, tt.want)
			}
		})
	}

	t.Run("an empty variable empties a list the file set", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "webhook:\n  allowed_networks: [10.0.0.0/8]\n", withToken("FORMS_WEBHOOK_ALLOWED_NETWORKS="))
		if len(cfg.Webhook.AllowedNetworks) != 0 {
			t.Errorf("allowed_networks = %v, want empty", cfg.Webhook.AllowedNetworks)
		}
	})
	t.Run("--config beats LoadOptions.ConfigFile", func(t *testing.T) {
		t.Parallel()
		opts := config.LoadOptions{
			ConfigFile: writeFile(t, "worker:\n  lease_seconds: 100\n"),
			Environ:    withToken(),
			Args:       []string{"--config", writeFile(t, "worker:\n  lease_seconds: 200\n")},
		}
		cfg, _, err := config.Load(opts)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Workers.LeaseSeconds != 200 {
			t.Errorf("worker.lease_seconds = %d, want 200 from the --config file", cfg.Workers.LeaseSeconds)
		}
	})
	t.Run("a bool flag alone means true", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "", nil, "--server.insecure_dev_mode")
		if !cfg.Server.InsecureDevMode {
			t.Error("insecure_dev_mode is false")
		}
	})
}

// Not parallel: it sets a real environment variable, which Load must not
// see.
func TestTheEnvironmentIsOnlyWhatLoadOptionsCarries(t *testing.T) {
	t.Setenv("FORMS_WORKER_LEASE_SECONDS", "999")
	cfg, _ := mustLoad(t, "", withToken())
	if cfg.Workers.LeaseSeconds != 60 {
		t.Errorf("worker.lease_seconds = %d: Load read the process environment", cfg.Workers.LeaseSeconds)
	}
}

func TestMissingOrBrokenFile(t *testing.T) {
	t.Parallel()
	_, _, err := config.Load(config.LoadOptions{ConfigFile: filepath.Join(t.TempDir(), "nope.yaml"), Environ: withToken()})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v, want an error wrapping fs.ErrNotExist naming the file", err)
	}
	for _, text := range []string{"worker: [unclosed\n", "- a\n- b\n", "just text\n", "worker:\n\tlease_seconds: 5\n"} {
		_, _, err := load(t, text, withToken())
		if err == nil || !strings.Contains(err.Error(), "not valid YAML") {
			t.Errorf("file %q: %v, want a YAML error", text, err)
		}
	}
}

func TestHelpListsEveryKey(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, _, err := config.Load(config.LoadOptions{Args: []string{"--help"}, Output: &out, Program: "hymical serve"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	if help != config.Help("hymical serve") {
		t.Error("--help and Help differ")
	}
	// Every key: its line with type and default, then its variable and flag.
	defaults := map[string]string{
		"database.url": "sqlite:hymical.db", "server.listen": "127.0.0.1:8080", "server.max_body_bytes": "1048576",
		"server.max_nesting_depth":     "64",
		"server.secret_rotation_grace": "24h", "server.read_header_timeout": "10s", "server.read_timeout": "30s",
		"server.write_timeout": "1m", "server.idle_timeout": "1m", "server.max_header_bytes": "65536",
		"server.max_connections": "0", "server.max_connections_per_address": "0",
		"server.auth_failures": "10", "server.auth_failure_window": "5m", "server.auth_failure_clients": "10000", "worker.lease_seconds": "60", "worker.concurrency": "16",
		"worker.batch_size": "64", "worker.poll_interval": "2s", "worker.max_attempts": "5",
		"worker.retry_delays": "30s,2m,10m,1h", "worker.retry_jitter": "0.2", "worker.endpoint_share": "0.25", "worker.max_retry_after": "1h",
		"webhook.connect_timeout_seconds": "5", "webhook.read_timeout_seconds": "10", "plugins.send_grace": "2s",
		"plugins.start_timeout": "10s", "plugins.validate_timeout": "10s", "log.level": "info", "log.format": "text", "plugins.dir": `""`,
		"server.insecure_dev_mode": "false", "telemetry.exporter": "none", "telemetry.service_name": "hymical",
		"telemetry.metrics": "false", "telemetry.insecure": "false", "telemetry.metrics_public": "false", "telemetry.endpoint": `""`,
		"retention.delivered_max_age": "0s", "retention.interval": "10m",
		"endpoints.disable_on_gone": "false", "endpoints.disable_after_failing": "0s", "endpoints.health_interval": "1m", "endpoints.operator_endpoint": `""`,
		"endpoints.retry_min_delay": "1s", "endpoints.retry_max_delay": "24h", "endpoints.retry_max_attempts": "20",
		"console.enabled": "true", "console.trace_url_template": `""`, "console.session_ttl": "12h",
		"portal.enabled": "true", "portal.brand_name": `""`, "portal.accent_color": `""`,
	}
	lines := strings.Split(help, "\n")
	listed := 0
	for i, line := range lines {
		key, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
		if !ok || !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") || !strings.Contains(key, ".") || strings.Contains(key, " ") {
			continue
		}
		listed++
		if !slices.Contains(allKeys, key) {
			t.Errorf("--help lists %s, which is not a key", key)
			continue
		}
		if d, ok := defaults[key]; ok && !strings.Contains(rest, "default "+d+")") {
			t.Errorf("--help line %q does not give the default %s", line, d)
		}
		next := lines[i+1]
		if key == "plugins.list" {
			if !strings.Contains(next, "config file only") {
				t.Errorf("plugins.list: %q", next)
			}
		} else if !strings.Contains(next, "env "+envName(key)) || !strings.Contains(next, "flag --"+key) {
			t.Errorf("%s: line %q does not name %s and --%s", key, next, envName(key), key)
		}
		if strings.TrimSpace(lines[i+2]) == "" {
			t.Errorf("%s has no doc text in --help", key)
		}
	}
	if listed != len(allKeys) {
		t.Errorf("--help lists %d keys, want %d", listed, len(allKeys))
	}
	if !strings.Contains(help, "--config PATH") {
		t.Error("--help does not mention --config")
	}
}

// TestHelpStatesTheFacesBound holds the doc of server.max_nesting_depth,
// a struct tag that cannot name a constant, to the bound the API enforces.
func TestHelpStatesTheFacesBound(t *testing.T) {
	t.Parallel()
	help := strings.Join(strings.Fields(config.Help("hymical serve")), " ")
	if want := fmt.Sprintf("refused with 400. At most %d.", faceopts.MaxNestingDepthLimit); !strings.Contains(help, want) {
		t.Errorf("--help does not say %q of server.max_nesting_depth", want)
	}
}

func TestShippedConfigFilesLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		check func(config.Config) error
	}{
		{"sqlite.yaml", func(c config.Config) error {
			if !strings.HasPrefix(c.Database.URL.Reveal(), "sqlite:") || c.Log.Format != "text" {
				return fmt.Errorf("not a SQLite config: %v", c)
			}
			return nil
		}},
		{"postgres.yaml", func(c config.Config) error {
			if !strings.HasPrefix(c.Database.URL.Reveal(), "postgres://") || c.Server.Listen != ":8080" || c.Log.Format != "json" {
				return fmt.Errorf("not a PostgreSQL config: %v", c)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("..", "..", "configs", tt.file)
			cfg, warnings, err := config.Load(config.LoadOptions{ConfigFile: path, Environ: withToken()})
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) > 0 {
				t.Errorf("warnings: %q", warnings)
			}
			if err := tt.check(cfg); err != nil {
				t.Error(err)
			}
			if cfg.Server.AdminToken.Reveal() != adminToken {
				t.Error("the admin token from the environment was not used")
			}
			if err := cfg.Worker().Validate(); err != nil {
				t.Errorf("the worker refuses it: %v", err)
			}
			// Fully commented: every key appears, set or commented out.
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range allKeys {
				_, name, _ := strings.Cut(key, ".")
				if !strings.Contains(string(text), name+":") {
					t.Errorf("%s does not mention %s", tt.file, key)
				}
			}
		})
	}
}

func TestLoadGeneratesAnAdminTokenWhenNoneIsConfigured(t *testing.T) {
	gen := func() (string, error) { return "generated-token-0123456789abcdef", nil }
	cfg, warnings, err := config.Load(config.LoadOptions{GenerateAdminToken: gen})
	if err != nil {
		t.Fatalf("Load with no configuration at all: %v", err)
	}
	if cfg.Server.AdminToken.Reveal() != "generated-token-0123456789abcdef" {
		t.Fatal("the generated token was not used")
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "generated") || strings.Contains(strings.Join(warnings, "\n"), "generated-token-0123") {
		t.Fatalf("warnings = %q: want one saying a token was generated, without the token", warnings)
	}
	// A configured token, or dev mode, is never replaced.
	cfg, _, err = config.Load(config.LoadOptions{GenerateAdminToken: gen, Environ: []string{"FORMS_SERVER_ADMIN_TOKEN=configured-token-0123456789"}})
	if err != nil || cfg.Server.AdminToken.Reveal() != "configured-token-0123456789" {
		t.Fatalf("configured token: %v", err)
	}
	cfg, _, err = config.Load(config.LoadOptions{GenerateAdminToken: gen, Environ: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true"}})
	if err != nil || cfg.Server.AdminToken.Reveal() != "" {
		t.Fatalf("dev mode: token %q, %v", cfg.Server.AdminToken.Reveal(), err)
	}
}
