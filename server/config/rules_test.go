package config_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/config"
)

func TestUnknownKeysAreErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
		args []string
		key  string
		want []string // in the problem's message
	}{
		{name: "typo in the file", file: "worker:\n  lease_second: 60\n",
			key: "worker.lease_second", want: []string{"not a key", "did you mean worker.lease_seconds?", "--help"}},
		{name: "typo in a section name", file: "databse:\n  url: sqlite:x.db\n",
			key: "databse.url", want: []string{"did you mean database.url?"}},
		{name: "dotted key in the file", file: "worker.lease_secs: 5\n",
			key: "worker.lease_secs", want: []string{"did you mean worker.lease_seconds?"}},
		{name: "made-up key", file: "verbose: true\n", key: "verbose", want: []string{"is not a key", "remove or rename it"}},
		{name: "wrong case", file: "Worker:\n  lease_seconds: 60\n", key: "Worker.lease_seconds", want: []string{"did you mean worker.lease_seconds?"}},
		{name: "key in a plugin entry", file: "plugins:\n  list:\n    - name: http\n      sah256: abc\n",
			key: "plugins.list[0].sah256", want: []string{"not a key of a plugin entry", "did you mean sha256?"}},
		{name: "typo in a variable", env: []string{"FORMS_WORKER_LEASE_SECOND=60"},
			key: "FORMS_WORKER_LEASE_SECOND", want: []string{"not a setting", "did you mean FORMS_WORKER_LEASE_SECONDS?"}},
		{name: "variable in the wrong case", env: []string{"FORMS_worker_lease_seconds=60"},
			key: "FORMS_worker_lease_seconds", want: []string{"did you mean FORMS_WORKER_LEASE_SECONDS?"}},
		{name: "made-up variable", env: []string{"FORMS_DEBUG=1"}, key: "FORMS_DEBUG", want: []string{"FORMS_<SECTION>_<KEY>"}},
		{name: "typo in a flag", args: []string{"--worker.lease_secs=5"},
			key: "--worker.lease_secs", want: []string{"not a flag", "did you mean worker.lease_seconds?"}},
		{name: "plugins.list is file only", args: []string{"--plugins.list=x"}, key: "--plugins.list", want: []string{"not a flag"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := load(t, tt.file, withToken(tt.env...), tt.args...)
			if !errors.Is(err, config.ErrUnknownKey) {
				t.Fatalf("err = %v, want ErrUnknownKey", err)
			}
			p := problemFor(t, err, tt.key)
			for _, w := range tt.want {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not say %q", p.Message, w)
				}
			}
		})
	}

	t.Run("every problem is reported at once", func(t *testing.T) {
		t.Parallel()
		_, _, err := load(t, "worker:\n  lease_second: 1\n  concurency: 2\n", withToken("FORMS_LOG_LEVL=debug"))
		if got := len(problems(t, err)); got != 3 {
			t.Errorf("%d problems, want 3: %v", got, err)
		}
	})
	t.Run("FORMS_PLUGINS_LIST points to the file", func(t *testing.T) {
		t.Parallel()
		_, _, err := load(t, "", withToken("FORMS_PLUGINS_LIST=http"))
		p := problemFor(t, err, "plugins.list")
		if !strings.Contains(p.Message, "config file") {
			t.Errorf("message %q does not point to the config file", p.Message)
		}
	})
	t.Run("a section given a value", func(t *testing.T) {
		t.Parallel()
		_, _, err := load(t, "worker: 5\n", withToken())
		p := problemFor(t, err, "worker")
		if !strings.Contains(p.Message, "is a section") {
			t.Errorf("message %q", p.Message)
		}
	})
	t.Run("arguments that are not flags", func(t *testing.T) {
		t.Parallel()
		_, _, err := load(t, "", withToken(), "serve")
		if p := problemFor(t, err, "flags"); !strings.Contains(p.Message, "--KEY=VALUE") {
			t.Errorf("message %q", p.Message)
		}
	})
}

func TestValuesAreChecked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
		key  string
		want []string // in the problem's message, besides the key
	}{
		// Counts.
		{name: "zero lease", env: []string{"FORMS_WORKER_LEASE_SECONDS=0"}, key: "worker.lease_seconds", want: []string{"at least 1", "default is 60"}},
		{name: "negative lease", file: "worker:\n  lease_seconds: -5\n", key: "worker.lease_seconds", want: []string{"at least 1"}},
		{name: "absurd lease", file: "worker:\n  lease_seconds: 100000000\n", key: "worker.lease_seconds", want: []string{"at most"}},
		{name: "lease not a number", env: []string{"FORMS_WORKER_LEASE_SECONDS=sixty"}, key: "worker.lease_seconds", want: []string{`"sixty"`, "whole number", "FORMS_WORKER_LEASE_SECONDS"}},
		{name: "lease with a fraction", file: "worker:\n  lease_seconds: 60.5\n", key: "worker.lease_seconds", want: []string{"whole number", "config file"}},
		{name: "lease as a list", file: "worker:\n  lease_seconds: [60]\n", key: "worker.lease_seconds", want: []string{"not a list"}},
		{name: "lease as a map", file: "worker:\n  lease_seconds:\n    value: 60\n", key: "worker.lease_seconds", want: []string{"not a map"}},
		{name: "zero concurrency", env: []string{"FORMS_WORKER_CONCURRENCY=0"}, key: "worker.concurrency", want: []string{"at least 1"}},
		{name: "negative batch size", file: "worker:\n  batch_size: -1\n", key: "worker.batch_size", want: []string{"at least 1"}},
		{name: "zero attempts", file: "worker:\n  max_attempts: 0\n", key: "worker.max_attempts", want: []string{"at least 1"}},
		{name: "zero connect timeout", env: []string{"FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS=0"}, key: "webhook.connect_timeout_seconds", want: []string{"at least 1"}},
		{name: "negative read timeout", file: "webhook:\n  read_timeout_seconds: -10\n", key: "webhook.read_timeout_seconds", want: []string{"at least 1"}},
		{name: "zero body limit", file: "server:\n  max_body_bytes: 0\n", key: "server.max_body_bytes", want: []string{"positive"}},
		{name: "zero nesting depth", file: "server:\n  max_nesting_depth: 0\n", key: "server.max_nesting_depth", want: []string{"from 1 to 1000", "default is 64"}},
		{name: "nesting depth too deep", env: []string{"FORMS_SERVER_MAX_NESTING_DEPTH=5000"}, key: "server.max_nesting_depth", want: []string{"5000", "from 1 to 1000", "FORMS_SERVER_MAX_NESTING_DEPTH"}},
		// Durations.
		{name: "duration without a unit", file: "worker:\n  poll_interval: 5\n", key: "worker.poll_interval", want: []string{"no unit", "500ms"}},
		{name: "duration that is a word", env: []string{"FORMS_WORKER_POLL_INTERVAL=fast"}, key: "worker.poll_interval", want: []string{`"fast"`, "not a duration"}},
		{name: "zero poll interval", file: "worker:\n  poll_interval: 0s\n", key: "worker.poll_interval", want: []string{"positive"}},
		{name: "negative grace", file: "plugins:\n  send_grace: -1s\n", key: "plugins.send_grace", want: []string{"positive"}},
		{name: "zero start timeout", env: []string{"FORMS_PLUGINS_START_TIMEOUT=0"}, key: "plugins.start_timeout", want: []string{"positive"}},
		{name: "zero validate timeout", env: []string{"FORMS_PLUGINS_VALIDATE_TIMEOUT=0"}, key: "plugins.validate_timeout", want: []string{"positive"}},
		{name: "zero rotation grace", file: "server:\n  secret_rotation_grace: 0s\n", key: "server.secret_rotation_grace", want: []string{"positive"}},
		{name: "zero read timeout", env: []string{"FORMS_SERVER_READ_TIMEOUT=0"}, key: "server.read_timeout", want: []string{"positive"}},
		{name: "zero idle timeout", file: "server:\n  idle_timeout: 0s\n", key: "server.idle_timeout", want: []string{"positive"}},
		{name: "tiny header limit", env: []string{"FORMS_SERVER_MAX_HEADER_BYTES=100"}, key: "server.max_header_bytes", want: []string{"at least 4096"}},
		{name: "negative connection limit", env: []string{"FORMS_SERVER_MAX_CONNECTIONS=-1"}, key: "server.max_connections", want: []string{"-1", "FORMS_SERVER_MAX_CONNECTIONS", "0 to derive it from the open-file limit"}},
		{name: "absurd connection limit", file: "server:\n  max_connections: 5000000\n", key: "server.max_connections", want: []string{"at most 1000000"}},
		{name: "negative per-address limit", file: "server:\n  max_connections_per_address: -5\n", key: "server.max_connections_per_address", want: []string{"-5", "0 to derive"}},
		{name: "per-address limit over the total", file: "server:\n  max_connections: 100\n  max_connections_per_address: 200\n", key: "server.max_connections_per_address", want: []string{"200", "more than the 100 connections server.max_connections (set in", "lower it, or raise server.max_connections"}},
		{name: "no failed authentications allowed", env: []string{"FORMS_SERVER_AUTH_FAILURES=0"}, key: "server.auth_failures", want: []string{"at least 1", "default is 10"}},
		{name: "a limit on guesses that is none", file: "server:\n  auth_failures: 1000000\n", key: "server.auth_failures", want: []string{"at most 10000"}},
		{name: "zero failure window", env: []string{"FORMS_SERVER_AUTH_FAILURE_WINDOW=0s"}, key: "server.auth_failure_window", want: []string{"positive", "5m"}},
		{name: "no room for failing clients", file: "server:\n  auth_failure_clients: 0\n", key: "server.auth_failure_clients", want: []string{"at least 1"}},
		{name: "an absurd table of failing clients", env: []string{"FORMS_SERVER_AUTH_FAILURE_CLIENTS=100000000"}, key: "server.auth_failure_clients", want: []string{"at most 1000000"}},
		{name: "a trusted proxy that is not a CIDR", env: []string{"FORMS_SERVER_TRUSTED_PROXIES=10.0.0.0/8,proxy.internal"}, key: "server.trusted_proxies", want: []string{"item 2", "proxy.internal", "CIDR"}},
		{name: "a certificate without its key", env: []string{"FORMS_SERVER_TLS_CERT_FILE=/etc/hymical/cert.pem"}, key: "server.tls_key_file", want: []string{"server.tls_cert_file is", "both"}},
		{name: "a key without its certificate", file: "server:\n  tls_key_file: /etc/hymical/key.pem\n", key: "server.tls_cert_file", want: []string{"server.tls_key_file is", "both"}},
		{name: "trusting every address", file: "server:\n  trusted_proxies: [10.0.0.0/8, \"::/0\"]\n", key: "server.trusted_proxies", want: []string{"item 2", "::/0", "every address"}},
		{name: "retention too short", env: []string{"FORMS_RETENTION_DELIVERED_MAX_AGE=30m"}, key: "retention.delivered_max_age", want: []string{"at least 1h", "0 to keep everything"}},
		{name: "zero retention interval", file: "retention:\n  interval: 0s\n", key: "retention.interval", want: []string{"positive"}},
		{name: "failing span too short", env: []string{"FORMS_ENDPOINTS_DISABLE_AFTER_FAILING=10s"}, key: "endpoints.disable_after_failing", want: []string{"at least 1m", "0 to never"}},
		{name: "zero health interval", file: "endpoints:\n  health_interval: 0s\n", key: "endpoints.health_interval", want: []string{"positive"}},
		{name: "operator endpoint that is no id", env: []string{"FORMS_ENDPOINTS_OPERATOR_ENDPOINT=https://ops.example.com"}, key: "endpoints.operator_endpoint", want: []string{"not an endpoint id", "ep_"}},
		{name: "retry bounds the wrong way round", file: "endpoints:\n  retry_min_delay: 1h\n  retry_max_delay: 1m\n", key: "endpoints.retry_max_delay", want: []string{"shorter than endpoints.retry_min_delay"}},
		{name: "retry attempts cap of one", env: []string{"FORMS_ENDPOINTS_RETRY_MAX_ATTEMPTS=1"}, key: "endpoints.retry_max_attempts", want: []string{"between 2 and"}},
		{name: "negative Retry-After cap", env: []string{"FORMS_WORKER_MAX_RETRY_AFTER=-1m"}, key: "worker.max_retry_after", want: []string{"negative"}},
		{name: "no retry delays", file: "worker:\n  retry_delays: []\n", key: "worker.retry_delays", want: []string{"at least one"}},
		{name: "negative retry delay", file: "worker:\n  retry_delays: [30s, -1s]\n", key: "worker.retry_delays", want: []string{"item 2", "positive"}},
		{name: "retry delay that is a word", env: []string{"FORMS_WORKER_RETRY_DELAYS=30s,soon"}, key: "worker.retry_delays", want: []string{"item 2", `"soon"`}},
		{name: "retry delays as a map", file: "worker:\n  retry_delays:\n    first: 30s\n", key: "worker.retry_delays", want: []string{"must be a list"}},
		// Fractions and flags.
		{name: "jitter of 1", file: "worker:\n  retry_jitter: 1\n", key: "worker.retry_jitter", want: []string{"less than 1"}},
		{name: "no endpoint share", env: []string{"FORMS_WORKER_ENDPOINT_SHARE=0"}, key: "worker.endpoint_share", want: []string{"more than 0 and at most 1"}},
		{name: "endpoint share over 1", file: "worker:\n  endpoint_share: 1.5\n", key: "worker.endpoint_share", want: []string{"more than 0 and at most 1"}},
		{name: "negative jitter", env: []string{"FORMS_WORKER_RETRY_JITTER=-0.1"}, key: "worker.retry_jitter", want: []string{"at least 0"}},
		{name: "NaN jitter", file: "worker:\n  retry_jitter: .nan\n", key: "worker.retry_jitter", want: []string{"finite"}},
		{name: "not a bool", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=maybe"}, key: "server.insecure_dev_mode", want: []string{"true or false"}},
		// Addresses.
		{name: "listen without a port", env: []string{"FORMS_SERVER_LISTEN=localhost"}, key: "server.listen", want: []string{"HOST:PORT", ":8080"}},
		{name: "listen with a named port", env: []string{"FORMS_SERVER_LISTEN=127.0.0.1:http"}, key: "server.listen", want: []string{"bad port", "65535"}},
		{name: "listen with a port too large", file: "server:\n  listen: 127.0.0.1:70000\n", key: "server.listen", want: []string{"bad port"}},
		{name: "listen with a negative port", file: "server:\n  listen: \":-1\"\n", key: "server.listen", want: []string{"bad port"}},
		{name: "listen as a number", file: "server:\n  listen: 8080\n", key: "server.listen", want: []string{"must be text"}},
		{name: "bad CIDR", env: []string{"FORMS_WEBHOOK_ALLOWED_NETWORKS=10.0.0.0/8,10.0.0.0/33"}, key: "webhook.allowed_networks", want: []string{"item 2", "10.0.0.0/33", "CIDR"}},
		{name: "CIDR that is a word", file: "webhook:\n  allowed_networks: [intranet]\n", key: "webhook.allowed_networks", want: []string{"intranet", "CIDR"}},
		{name: "proxy with credentials in the URL", env: []string{"FORMS_WEBHOOK_PROXY=http://u:pw@proxy.internal:3128"}, key: "webhook.proxy",
			want: []string{"user name or password", "not shown", "FORMS_WEBHOOK_PROXY_USERNAME", "FORMS_WEBHOOK_PROXY_PASSWORD"}},
		{name: "SOCKS proxy", file: "webhook:\n  proxy: socks5://proxy.internal:1080\n", key: "webhook.proxy", want: []string{`"socks5"`, "CONNECT", "http://HOST:PORT"}},
		{name: "proxy without a scheme", env: []string{"FORMS_WEBHOOK_PROXY=proxy.internal:3128"}, key: "webhook.proxy", want: []string{"http://HOST:PORT"}},
		{name: "proxy with a path", env: []string{"FORMS_WEBHOOK_PROXY=http://proxy.internal:3128/egress"}, key: "webhook.proxy", want: []string{"path, query or fragment"}},
		{name: "proxy URL that does not parse", env: []string{"FORMS_WEBHOOK_PROXY=http://proxy.internal:port"}, key: "webhook.proxy", want: []string{"not a URL"}},
		{name: "proxy password without a user", env: []string{"FORMS_WEBHOOK_PROXY=http://proxy.internal:3128", "FORMS_WEBHOOK_PROXY_PASSWORD=pw"}, key: "webhook.proxy_username",
			want: []string{"webhook.proxy_password", "needs both", "FORMS_WEBHOOK_PROXY_USERNAME"}},
		{name: "proxy user with a colon", env: []string{"FORMS_WEBHOOK_PROXY=http://proxy.internal:3128", "FORMS_WEBHOOK_PROXY_USERNAME=a:b"}, key: "webhook.proxy_username", want: []string{"colon"}},
		{name: "http proxy in plugin settings", file: "plugins:\n  list:\n    - name: http\n      settings:\n        proxy: http://proxy.internal:3128\n",
			key: "plugins.list[0].settings.proxy", want: []string{"webhook.proxy"}},
		// The database.
		{name: "empty database URL", env: []string{"FORMS_DATABASE_URL="}, key: "database.url", want: []string{"empty", "sqlite:PATH", "postgres://"}},
		{name: "SQLite URL without a path", env: []string{"FORMS_DATABASE_URL=sqlite:"}, key: "database.url", want: []string{"names no file"}},
		{name: "unsupported database", env: []string{"FORMS_DATABASE_URL=mysql://u@h/db"}, key: "database.url", want: []string{"neither sqlite:PATH nor a postgres:// URL"}},
		{name: "bare path", env: []string{"FORMS_DATABASE_URL=/var/lib/hymical.db"}, key: "database.url", want: []string{"neither"}},
		{name: "upper-case scheme", env: []string{"FORMS_DATABASE_URL=Postgres://u@h/db"}, key: "database.url", want: []string{"lower case"}},
		{name: "sqlite3 scheme", env: []string{"FORMS_DATABASE_URL=sqlite3://x.db"}, key: "database.url", want: []string{"sqlite:PATH"}},
		{name: "unparseable PostgreSQL URL", env: []string{"FORMS_DATABASE_URL=postgres://u@h:port/db"}, key: "database.url", want: []string{"can be parsed", "percent-encoded"}},
		// The secrets key. The values are never shown (TestSecretsNeverShow
		// holds every message to it); these say what is wrong instead.
		{name: "secrets key too short", env: []string{"FORMS_SECRETS_KEY=c2hvcnQta2V5"}, key: "secrets.key", want: []string{"decodes to 9 bytes, want 32", "openssl rand -base64 32", "not shown"}},
		{name: "secrets key not base64", env: []string{"FORMS_SECRETS_KEY=not a key!"}, key: "secrets.key", want: []string{"neither base64 nor hex"}},
		{name: "secrets key and key file", env: []string{"FORMS_SECRETS_KEY=" + secretsKey, "FORMS_SECRETS_KEY_FILE=/etc/hymical/key"}, key: "secrets.key", want: []string{"secrets.key_file", "one way only"}},
		// Logging.
		{name: "unknown level", env: []string{"FORMS_LOG_LEVEL=verbose"}, key: "log.level", want: []string{`"verbose"`, "debug, info, warn or error"}},
		{name: "unknown format", file: "log:\n  format: xml\n", key: "log.format", want: []string{`"xml"`, "text or json"}},
		// Plugins.
		{name: "bad plugin name", file: "plugins:\n  list:\n    - name: HTTP!\n", key: "plugins.list[0].name", want: []string{"not a plugin name", "lowercase"}},
		{name: "plugin twice", file: "plugins:\n  list:\n    - name: nats\n    - name: nats\n", key: "plugins.list[1].name", want: []string{"already configured by plugins.list[0]"}},
		{name: "bad pin", file: "plugins:\n  list:\n    - name: nats\n      sha256: abc\n", key: "plugins.list[0].sha256", want: []string{"64 hex digits"}},
		{name: "pin as a number", file: "plugins:\n  list:\n    - name: nats\n      sha256: 1234\n", key: "plugins.list[0].sha256", want: []string{"put it in quotes"}},
		{name: "http timeout in plugin settings", file: "plugins:\n  list:\n    - name: http\n      settings:\n        connect_timeout: 3s\n",
			key: "plugins.list[0].settings.connect_timeout", want: []string{"webhook.connect_timeout_seconds"}},
		{name: "http networks in plugin settings", file: "plugins:\n  list:\n    - name: http\n      settings:\n        allowed_networks: 10.0.0.0/8\n",
			key: "plugins.list[0].settings.allowed_networks", want: []string{"webhook.allowed_networks"}},
		{name: "setting that is a map", file: "plugins:\n  list:\n    - name: nats\n      settings:\n        tls:\n          ca: x\n",
			key: "plugins.list[0].settings.tls", want: []string{"single value"}},
		{name: "plugin list that is a map", file: "plugins:\n  list:\n    http: {}\n", key: "plugins.list", want: []string{"list of plugin entries"}},
		{name: "plugin entry that is text", file: "plugins:\n  list:\n    - http\n", key: "plugins.list[0]", want: []string{"must be a map"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := load(t, tt.file, withToken(tt.env...))
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			p := problemFor(t, err, tt.key)
			if !strings.Contains(p.Message, tt.key) {
				t.Errorf("message %q does not name the key %s", p.Message, tt.key)
			}
			for _, w := range tt.want {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not say %q", p.Message, w)
				}
			}
			if !strings.Contains(err.Error(), p.Message) {
				t.Errorf("the error %q does not carry the problem %q", err, p.Message)
			}
		})
	}
}

// TestAcceptedValues are values at the edges that must load.
func TestAcceptedValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
	}{
		{"listen on every interface", "", []string{"FORMS_SERVER_LISTEN=:8080"}},
		{"listen on a free port", "", []string{"FORMS_SERVER_LISTEN=127.0.0.1:0"}},
		{"listen on IPv6 loopback", "", []string{"FORMS_SERVER_LISTEN=[::1]:8080"}},
		{"postgresql scheme over a socket", "", []string{"FORMS_DATABASE_URL=postgresql:///hymical?host=/run/postgresql"}},
		{"SQLite with slashes", "", []string{"FORMS_DATABASE_URL=sqlite:///var/lib/hymical.db"}},
		{"Retry-After ignored", "", []string{"FORMS_WORKER_MAX_RETRY_AFTER=0"}},
		{"no jitter", "worker:\n  retry_jitter: 0\n", nil},
		{"retention of 30 days", "", []string{"FORMS_RETENTION_DELIVERED_MAX_AGE=720h"}},
		{"never disable for failing", "", []string{"FORMS_ENDPOINTS_DISABLE_AFTER_FAILING=0"}},
		{"an operator endpoint and tight retry bounds", "endpoints:\n  disable_on_gone: true\n  operator_endpoint: ep_0123456789abcdef0123456789abcdef\n  retry_min_delay: 5s\n  retry_max_delay: 5s\n  retry_max_attempts: 2\n", nil},
		{"retry delays as one comma-separated string", "worker:\n  retry_delays: 10s,20s\n", nil},
		{"pinned plugin with settings", "plugins:\n  list:\n    - name: nats\n      path: /opt/nats-plugin\n      sha256: \"" +
			strings.Repeat("AB", 32) + "\"\n      settings:\n        url: nats://n:4222\n        retries: 3\n        tls: true\n", nil},
		{"empty sections", "server:\nworker: {}\n", nil},
		{"empty file", "# nothing here\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := mustLoad(t, tt.file, withToken(tt.env...))
			if err := cfg.Worker().Validate(); err != nil {
				t.Errorf("the worker refuses what Load accepted: %v", err)
			}
		})
	}
	t.Run("plugin settings and pins are read as text", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "plugins:\n  list:\n    - name: nats\n      sha256: \" "+strings.Repeat("AB", 32)+"\"\n      settings:\n        retries: 3\n        tls: true\n        ratio: 0.5\n        empty:\n", withToken())
		p := cfg.Plugins.List[0]
		if p.SHA256 != strings.Repeat("ab", 32) {
			t.Errorf("sha256 = %q, want it trimmed and in lower case", p.SHA256)
		}
		want := map[string]string{"retries": "3", "tls": "true", "ratio": "0.5", "empty": ""}
		for k, v := range want {
			if p.Settings[k] != v {
				t.Errorf("settings[%s] = %q, want %q", k, p.Settings[k], v)
			}
		}
	})
}

func TestLeaseMustOutlastTheTimeouts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		lease, connect, read int
		refused, warned      bool
	}{
		{"defaults: 60 against 15", 60, 5, 10, false, false},
		{"lease equal to the timeouts", 15, 5, 10, true, false},
		{"lease below the timeouts", 10, 5, 10, true, false},
		{"lease inside the plugin margin", 17, 5, 10, true, false},
		{"just past the send deadline", 18, 5, 10, false, true},
		{"just under twice", 29, 5, 10, false, true},
		{"exactly twice", 30, 5, 10, false, false},
		{"long timeouts, default lease", 60, 20, 20, false, true},
		{"long timeouts, lease too short", 40, 20, 20, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, warnings, err := load(t, "", withToken(
				"FORMS_WORKER_LEASE_SECONDS="+strconv.Itoa(tt.lease),
				"FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS="+strconv.Itoa(tt.connect),
				"FORMS_WEBHOOK_READ_TIMEOUT_SECONDS="+strconv.Itoa(tt.read),
			))
			if tt.refused {
				if err == nil {
					t.Fatal("accepted")
				}
				p := problemFor(t, err, "worker.lease_seconds")
				for _, w := range []string{"must comfortably outlast", "webhook.connect_timeout_seconds", "webhook.read_timeout_seconds", "Raise worker.lease_seconds"} {
					if !strings.Contains(p.Message, w) {
						t.Errorf("message %q does not say %q", p.Message, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			warned := false
			for _, w := range warnings {
				if strings.Contains(w, "worker.lease_seconds") && strings.Contains(w, "twice") {
					warned = true
				}
			}
			if warned != tt.warned {
				t.Errorf("warned = %v, want %v: %q", warned, tt.warned, warnings)
			}
			if err := cfg.Worker().Validate(); err != nil {
				t.Errorf("Load accepted a lease the worker refuses: %v", err)
			}
		})
	}
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     []string
		problem []string // empty: accepted
		warning []string
	}{
		{name: "missing", env: nil, problem: []string{"server.admin_token is not set", "FORMS_SERVER_ADMIN_TOKEN", "server.insecure_dev_mode"}},
		{name: "empty", env: []string{"FORMS_SERVER_ADMIN_TOKEN="}, problem: []string{"is not set"}},
		{name: "15 characters", env: []string{"FORMS_SERVER_ADMIN_TOKEN=abcdefghijklmno"}, problem: []string{"shorter than 16", "openssl rand"}},
		{name: "16 characters", env: []string{"FORMS_SERVER_ADMIN_TOKEN=abcdefghijklmnop"}},
		{name: "stray newline", env: []string{"FORMS_SERVER_ADMIN_TOKEN=abcdefghijklmnopqrs\n"}, problem: []string{"white space"}},
		{name: "insecure dev mode without a token", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true"},
			warning: []string{"INSECURE", "server.insecure_dev_mode", "never in production"}},
		{name: "insecure dev mode on every interface", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true", "FORMS_SERVER_LISTEN=:8080"},
			problem: []string{"server.insecure_dev_mode is true but server.listen (set by FORMS_SERVER_LISTEN) is \":8080\"", "other machines can reach", "127.0.0.1:8080", "set FORMS_SERVER_ADMIN_TOKEN"}},
		{name: "insecure dev mode on a public address", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true", "FORMS_SERVER_LISTEN=192.0.2.10:9000"},
			problem: []string{"server.insecure_dev_mode", "127.0.0.1:9000"}},
		{name: "insecure dev mode on IPv6 loopback", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true", "FORMS_SERVER_LISTEN=[::1]:8080"},
			warning: []string{"INSECURE"}},
		{name: "insecure dev mode on localhost", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true", "FORMS_SERVER_LISTEN=localhost:8080"},
			warning: []string{"INSECURE"}},
		{name: "insecure dev mode does not excuse a short token", env: []string{"FORMS_SERVER_INSECURE_DEV_MODE=true", "FORMS_SERVER_ADMIN_TOKEN=short"},
			problem: []string{"shorter than 16"}},
		{name: "ingest key equal to the admin token", env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + adminToken, "FORMS_SERVER_INGEST_KEYS=ingest-key-1," + adminToken},
			problem: []string{"item 2 is the same as server.admin_token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warnings, err := load(t, "", tt.env)
			if len(tt.problem) > 0 {
				if err == nil {
					t.Fatal("accepted")
				}
				msg := err.Error()
				for _, w := range tt.problem {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not say %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(warnings, "\n")
			for _, w := range tt.warning {
				if !strings.Contains(joined, w) {
					t.Errorf("warnings %q do not say %q", warnings, w)
				}
			}
			if len(tt.warning) == 0 && len(warnings) > 0 {
				t.Errorf("unexpected warnings %q", warnings)
			}
		})
	}
	t.Run("an empty ingest key in the file is refused", func(t *testing.T) {
		t.Parallel()
		_, _, err := load(t, "server:\n  ingest_keys: [\"key-one\", \"\"]\n", withToken())
		if p := problemFor(t, err, "server.ingest_keys"); !strings.Contains(p.Message, "item 2 is empty") {
			t.Errorf("message %q", p.Message)
		}
	})
}

func TestValidateAppliesTheSameRules(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	if _, err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "server.admin_token is not set") {
		t.Errorf("Validate of the defaults = %v, want the admin token required", err)
	}
	cfg.Server.AdminToken = adminToken
	if warnings, err := cfg.Validate(); err != nil || len(warnings) != 0 {
		t.Errorf("Validate = %q, %v", warnings, err)
	}
	cfg.Workers.LeaseSeconds = 15
	if _, err := cfg.Validate(); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("Validate with a short lease = %v", err)
	}
}

func TestMalformedFileValuesAreReportedEvenWhenOverridden(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"worker:\n  lease_seconds:\n    a: 1\n", "worker:\n  lease_seconds: {}\n"} {
		_, _, err := load(t, file, withToken("FORMS_WORKER_LEASE_SECONDS=30"))
		if p := problemFor(t, err, "worker.lease_seconds"); !strings.Contains(p.Message, "not a map") {
			t.Errorf("%q: message %q", file, p.Message)
		}
		if n := len(problems(t, err)); n != 1 {
			t.Errorf("%q: %d problems, want 1: %v", file, n, err)
		}
	}
}

// An operator endpoint is told only about endpoints the server disables on
// its own, which with endpoint health off (the default) never happens.
func TestOperatorEndpointWithoutHealthWarns(t *testing.T) {
	t.Parallel()
	const ops = "FORMS_ENDPOINTS_OPERATOR_ENDPOINT=ep_0123456789abcdef0123456789abcdef"
	const want = "endpoints.operator_endpoint is set but endpoint health is off"
	if _, warnings := mustLoad(t, "", withToken(ops)); !contains(want, warnings...) {
		t.Errorf("warnings %q lack %q", warnings, want)
	}
	for _, on := range []string{"FORMS_ENDPOINTS_DISABLE_ON_GONE=true", "FORMS_ENDPOINTS_DISABLE_AFTER_FAILING=120h"} {
		if _, warnings := mustLoad(t, "", withToken(ops, on)); len(warnings) > 0 {
			t.Errorf("with %s: warnings %q", on, warnings)
		}
	}
}
