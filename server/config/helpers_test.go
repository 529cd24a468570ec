package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/config"
)

// adminToken is a valid admin token for tests that are not about it.
const adminToken = "test-admin-token-0123456789abcdef"

// withToken is an environment holding only a valid admin token.
func withToken(env ...string) []string {
	return append([]string{"FORMS_SERVER_ADMIN_TOKEN=" + adminToken}, env...)
}

// writeFile writes YAML to a fresh file and returns its path.
func writeFile(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hymical.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// load runs Load on YAML contents (none when empty), an environment and
// flags.
func load(t testing.TB, yaml string, env []string, args ...string) (config.Config, []string, error) {
	t.Helper()
	opts := config.LoadOptions{Environ: env, Args: args}
	if yaml != "" {
		opts.ConfigFile = writeFile(t, yaml)
	}
	return config.Load(opts)
}

// mustLoad is load for configurations that must be valid.
func mustLoad(t testing.TB, yaml string, env []string, args ...string) (config.Config, []string) {
	t.Helper()
	cfg, warnings, err := load(t, yaml, env, args...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg, warnings
}

// problems returns the problems of a Load error, failing when err is not
// an *config.Error.
func problems(t testing.TB, err error) []config.Problem {
	t.Helper()
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v (%T) is not a *config.Error", err, err)
	}
	return cerr.Problems
}

// problemFor returns the problem about key.
func problemFor(t testing.TB, err error, key string) config.Problem {
	t.Helper()
	ps := problems(t, err)
	for _, p := range ps {
		if p.Key == key {
			return p
		}
	}
	t.Fatalf("no problem about %s in: %v", key, err)
	return config.Problem{}
}

// secretsKey is a valid secrets.key: 32 bytes in base64.
const secretsKey = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA="

// allKeys is every key of the configuration, written out: it is the
// specification of the names, and TestHelpListsEveryKey holds --help to it.
var allKeys = []string{
	"database.url",
	"secrets.key", "secrets.key_file",
	"server.listen", "server.admin_token", "server.ingest_keys", "server.insecure_dev_mode",
	"server.max_body_bytes", "server.secret_rotation_grace", "server.read_header_timeout", "server.read_timeout",
	"server.write_timeout", "server.idle_timeout", "server.max_header_bytes",
	"server.max_connections", "server.max_connections_per_address",
	"server.auth_failures", "server.auth_failure_window", "server.auth_failure_clients",
	"server.trusted_proxies", "server.tls_cert_file", "server.tls_key_file",
	"server.max_nesting_depth",
	"worker.lease_seconds", "worker.concurrency", "worker.endpoint_share", "worker.batch_size", "worker.poll_interval",
	"worker.max_attempts", "worker.retry_delays", "worker.retry_jitter", "worker.max_retry_after",
	"webhook.connect_timeout_seconds", "webhook.read_timeout_seconds", "webhook.allowed_networks",
	"webhook.proxy", "webhook.proxy_username", "webhook.proxy_password",
	"plugins.dir", "plugins.send_grace", "plugins.start_timeout", "plugins.validate_timeout", "plugins.list",
	"log.level", "log.format",
	"endpoints.disable_on_gone", "endpoints.disable_after_failing", "endpoints.health_interval", "endpoints.operator_endpoint",
	"endpoints.retry_min_delay", "endpoints.retry_max_delay", "endpoints.retry_max_attempts",
	"retention.delivered_max_age", "retention.interval",
	"console.enabled", "console.trace_url_template", "console.session_ttl",
	"portal.enabled", "portal.frame_ancestors", "portal.brand_name", "portal.accent_color",
	"telemetry.exporter", "telemetry.endpoint", "telemetry.insecure", "telemetry.service_name",
	"telemetry.resource_attributes", "telemetry.metrics", "telemetry.metrics_public",
}

func envName(key string) string {
	return "FORMS_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// contains reports whether any of the texts contains s.
func contains(s string, texts ...string) bool {
	for _, t := range texts {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}
