// Package config loads the delivery server's configuration: built-in
// defaults, then a YAML file, then FORMS_* environment variables, then
// command-line flags, layered with koanf. It owns the key names, their
// defaults, their documentation (the doc struct tags, which --help prints,
// so the two cannot drift), every rule a value must pass before the server
// starts, and the conversion into the worker's, the plugin host's and the
// telemetry set-up's own configs.
//
// It must not open the database, start a plugin or listen on a socket: it
// only says whether a configuration makes sense. It must never show a
// secret (the admin token, the ingest keys, the database password, plugin
// settings whose names say they are secret): not in an error, not in a
// warning, not in String or LogValue.
//
// # Defaults and bounds
//
// A default or a bound belongs to the component that falls back to it or
// enforces it, and this package imports it from there rather than write
// the number again: the worker's (worker.DefaultConfig), the plugin
// host's, authlimit's, telemetry's, the store's (storage.MaxRetrySchedule)
// and the HTTP faces' (server/faceopts: this package may not link the
// faces themselves, so their defaults live in that leaf, which both
// import). The numbers written here are those no component holds: the
// HTTP server's timeouts and header size, the fleet jobs' intervals, the
// database URL, and the ceilings that catch a typo in a count before it
// reaches arithmetic (maxConcurrency and the like). A transport plugin is
// another program, configured across the plugin boundary: the webhook
// timeouts are this package's, always sent to the http plugin, and a test
// holds them to the plugin's own fallbacks.
package config

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/authlimit"
	"github.com/hymical/hymical/server/faceopts"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/telemetry"
	"github.com/hymical/hymical/server/worker"
)

// Config is the whole configuration of `hymical serve`. Every field has a
// koanf tag (its key in the file, the environment and the flags) and a doc
// tag (what --help says about it).
//
// The worker section is the field Workers because Config has a Worker
// method; its key is still "worker".
type Config struct {
	Database  DatabaseConfig  `koanf:"database" doc:"Where delivery state is kept."`
	Secrets   SecretsConfig   `koanf:"secrets" doc:"Encryption of endpoint signing secrets at rest (AES-256-GCM), so a copy of the database or a backup of it cannot sign webhooks. With neither key set: SQLite uses the key file DATABASE.key beside the database, made on first start; PostgreSQL keeps them in plaintext and warns. Once a database's secrets are encrypted, the server does not start without their key."`
	Server    ServerConfig    `koanf:"server" doc:"The HTTP API: where it listens and who may call it."`
	Workers   WorkerConfig    `koanf:"worker" doc:"The delivery loop: how deliveries are claimed, leased and retried."`
	Webhook   WebhookConfig   `koanf:"webhook" doc:"Sending to receivers over HTTP; handed to the http transport plugin."`
	Plugins   PluginsConfig   `koanf:"plugins" doc:"Transport plugins: where they are and how they are run."`
	Log       LogConfig       `koanf:"log" doc:"The server's own log."`
	Endpoints EndpointsConfig `koanf:"endpoints" doc:"Endpoint health, off by default: disabling endpoints that are gone or keep failing, telling an operator endpoint when that happens; and the bounds of the retry schedule an endpoint may set for itself."`
	Retention RetentionConfig `koanf:"retention" doc:"Removing delivered deliveries once they are old, so the tables do not grow without end. Off by default: nothing is ever removed unless delivered_max_age is set."`
	Console   ConsoleConfig   `koanf:"console" doc:"The operator console: web pages at /console on the API's listener to find, inspect and replay deliveries and to manage endpoints, behind the admin token."`
	Portal    PortalConfig    `koanf:"portal" doc:"The portal: the console's pages at /portal for the owners of a few forms, scoped to them, embeddable in another product's page."`
	Telemetry TelemetryConfig `koanf:"telemetry" doc:"OpenTelemetry: a trace of every attempt, from the ingest request through the plugin to the receiver, and Prometheus metrics on /metrics. Both are off by default, at no cost. The standard OTEL_* variables (OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME and the rest) are honoured as well, and passed on to the plugins."`
}

// DatabaseConfig says where delivery state is kept.
type DatabaseConfig struct {
	URL DatabaseURL `koanf:"url" doc:"sqlite:PATH for one process on one host (an embedded SQLite file, created if missing), or postgres://USER:PASSWORD@HOST:PORT/DB for any number of processes sharing one PostgreSQL. Prefer the environment for a URL that holds a password."`
}

// SecretsConfig is where the key that encrypts endpoint signing secrets
// comes from: at most one of the two.
type SecretsConfig struct {
	Key     Secret `koanf:"key" doc:"The key itself: 32 random bytes in base64 or hex, e.g. the output of openssl rand -base64 32. Give it through FORMS_SECRETS_KEY or a secret store, never a flag or a checked-in file; its id, not the key, is recorded in the database."`
	KeyFile string `koanf:"key_file" doc:"A file holding the key (base64 or hex, one line), readable by the server's user only. Instead of secrets.key."`
}

// ServerConfig is the HTTP API's.
type ServerConfig struct {
	Listen              string        `koanf:"listen" doc:"HOST:PORT the HTTP API listens on. The default answers only on this machine; use :8080 to listen on every interface."`
	AdminToken          Secret        `koanf:"admin_token" doc:"Bearer token that authorises every API route. Required unless server.insecure_dev_mode is true; at least 16 characters (e.g. the output of openssl rand -hex 32). Give it through FORMS_SERVER_ADMIN_TOKEN rather than a flag, which other users can see in the process list."`
	IngestKeys          []Secret      `koanf:"ingest_keys" doc:"Keys that authorise only the ingest routes (submissions and events), for the form front ends. Comma-separated in the environment; more than one lets a key be rotated without downtime."`
	InsecureDevMode     bool          `koanf:"insecure_dev_mode" doc:"Run without an admin token, on a development machine only: anyone who can reach server.listen can change endpoints and replay deliveries."`
	MaxBodyBytes        int64         `koanf:"max_body_bytes" doc:"Largest request body the API accepts, in bytes; larger ones are refused with 413."`
	MaxNestingDepth     int           `koanf:"max_nesting_depth" doc:"Deepest nesting of objects and arrays a request body may have, the outermost counting as 1 (an event's payload is at level 2 of its body); deeper ones are refused with 400. At most 1000. The signed payload wraps a submission's data two levels deeper, and some receivers' parsers stop at 100 levels."`
	SecretRotationGrace time.Duration `koanf:"secret_rotation_grace" doc:"How long a rotated-out endpoint signing secret keeps signing next to the new one, so receivers can switch without failed verifications."`
	ReadHeaderTimeout   time.Duration `koanf:"read_header_timeout" doc:"Time a client has to send a request's headers; a connection that stalls longer is closed."`
	ReadTimeout         time.Duration `koanf:"read_timeout" doc:"Time a client has to send a whole request, headers and body, whether or not it is authorised: a body that stalls is cut off at this point, so nobody can hold connections open by sending slowly."`
	WriteTimeout        time.Duration `koanf:"write_timeout" doc:"Time the server has to write a response, from the end of the request's headers; a client that does not read it is cut off."`
	IdleTimeout         time.Duration `koanf:"idle_timeout" doc:"How long a keep-alive connection may wait for its next request before it is closed."`
	MaxHeaderBytes      int           `koanf:"max_header_bytes" doc:"Largest size of a request's headers, in bytes; larger ones are answered 431."`

	// Connections held at once: server/connlimit.
	MaxConnections           int `koanf:"max_connections" doc:"Most connections the API holds at once. 0 derives it from the process's open-file limit, keeping 128 plus an eighth of the limit for the database, the plugins and telemetry (1664 at a limit of 2048), and at most 10000. At the limit, a client address holding less than its share (the limit divided among the addresses connected) takes the place of a waiting connection (no request sent yet, or else idle) of the address holding most; otherwise the new connection is closed at once."`
	MaxConnectionsPerAddress int `koanf:"max_connections_per_address" doc:"Most connections one client address (IPv6 counted by /64, loopback included) holds at once; over it, that address's own oldest idle keep-alive makes room, or the new connection is closed at once. 0 is a quarter of server.max_connections, at most 256. Behind a reverse proxy every client has the proxy's address: raise it to server.max_connections there."`

	// Guessed credentials: server/authlimit, shared by the API and the console.
	AuthFailures       int           `koanf:"auth_failures" doc:"Failed authentications (a wrong bearer token or ingest key, a wrong console login, an unknown console session) one client address may have within server.auth_failure_window. After that every request it makes to a route that needs a credential is answered 429 with Retry-After until the window ends, even with the right token. The address is the TCP peer (IPv6 counted by /64), or the one forwarded by a proxy in server.trusted_proxies; without that setting, behind a reverse proxy all clients share the proxy's."`
	AuthFailureWindow  time.Duration `koanf:"auth_failure_window" doc:"How long failed authentications are counted from an address's first one, and so the longest it is refused."`
	AuthFailureClients int           `koanf:"auth_failure_clients" doc:"How many client addresses with failures are remembered at once (and as many that authenticated recently); memory is fixed by it, about 160 bytes an address. A record is never dropped before its window ends: when the table is full, addresses not in it share an allowance of server.auth_failures failures a second (those that authenticated recently are exempt), so a new client is held up for at most a second, and only while such an attack goes on."`

	// Native TLS, for a server without a reverse proxy in front.
	TLSCertFile string `koanf:"tls_cert_file" doc:"PEM certificate (chain, leaf first) to serve the API and the console over HTTPS on server.listen; with server.tls_key_file, both or neither. Empty (the default) serves plain HTTP, for a reverse proxy that terminates TLS. Read at start (a file that cannot be read, or a pair that does not match, stops the server) and again on SIGHUP: a renewed certificate is served from the next connection, and a bad file on reload keeps the previous pair and logs an error. TLS 1.2 at least."`
	TLSKeyFile  string `koanf:"tls_key_file" doc:"PEM private key of server.tls_cert_file, readable by the server's user only. Reloaded with the certificate on SIGHUP."`

	// Whose forwarding headers name the client: server/authlimit.
	TrustedProxies []netip.Prefix `koanf:"trusted_proxies" doc:"CIDRs (or single addresses) of the reverse proxies in front of the server. A request whose TCP peer is one of them counts as coming from the address they forwarded: the Forwarded header (or else X-Forwarded-For) is read from the right, skipping these proxies, and the first other address is the client, for server.auth_failures and the logs. Empty (the default): the TCP peer is the client, and the headers are ignored; behind a proxy every client then has the proxy's address, so one client's failed logins lock out all. List only proxies that append to the header: a client that can reach the server directly past them could name any address. The connection limits always count the TCP peer. Comma-separated in the environment."`
}

// WorkerConfig is the delivery loop's.
type WorkerConfig struct {
	LeaseSeconds  int             `koanf:"lease_seconds" doc:"How long a claim holds, in seconds. Lower recovers faster from a dead worker; it must comfortably outlast webhook.connect_timeout_seconds + webhook.read_timeout_seconds (refused at or below their sum plus the 2s plugin margin, warned below twice their sum), or a delivery still in flight is claimed and sent again."`
	Concurrency   int             `koanf:"concurrency" doc:"How many sends may be in flight at once in this process; a quarter more (at least one) are kept for endpoints with nothing else in flight or waiting."`
	EndpointShare float64         `koanf:"endpoint_share" doc:"Fair share: the fraction of this process's worker.concurrency senders one endpoint may hold while other endpoints have due work (at least one sender), so a receiver that hangs cannot stall the rest. A new endpoint gets one sender until a send to it finishes; slow ones (a send of 1s or more) share one such fraction between them; a quick one may use every sender when nothing else is due. 1 turns the share off."`
	BatchSize     int             `koanf:"batch_size" doc:"Most deliveries claimed in one database statement, and the most claims queued for the senders: larger batches cost fewer statements a delivery when there is a backlog, and hold more claims (and their payloads) in memory."`
	PollInterval  time.Duration   `koanf:"poll_interval" doc:"How long an idle worker waits before looking for due deliveries again when nothing woke it. Deliveries that become due (created, released, replayed, let go by enabling an endpoint) wake the workers at once, on PostgreSQL across processes (LISTEN/NOTIFY), and retries wake the process that scheduled them when they are due; the poll is the fallback that finds expired leases and anything whose wake-up was missed."`
	MaxAttempts   int             `koanf:"max_attempts" doc:"Requests a delivery gets per cycle before it fails for good (a replay starts a fresh cycle)."`
	RetryDelays   []time.Duration `koanf:"retry_delays" doc:"Wait after the 1st, 2nd, ... failed request of a cycle; the last entry repeats when worker.max_attempts is longer than the list. Comma-separated in the environment."`
	RetryJitter   float64         `koanf:"retry_jitter" doc:"Fraction in [0, 1) each retry delay is spread by, so deliveries that failed together do not all come back at once."`
	MaxRetryAfter time.Duration   `koanf:"max_retry_after" doc:"Cap on how far a receiver's Retry-After header can push a retry; 0 ignores Retry-After."`
}

// WebhookConfig is the HTTP sending's, handed to the http transport plugin.
type WebhookConfig struct {
	ConnectTimeoutSeconds int            `koanf:"connect_timeout_seconds" doc:"Seconds allowed to connect to a receiver (TCP and TLS)."`
	ReadTimeoutSeconds    int            `koanf:"read_timeout_seconds" doc:"Seconds allowed for a receiver's response headers once the request is sent."`
	AllowedNetworks       []netip.Prefix `koanf:"allowed_networks" doc:"CIDRs (or single addresses) of receivers that are not globally reachable (private, loopback, link-local, CGNAT and the other special-purpose ranges, and their NAT64 and 6to4 forms) but may be sent to; by default such addresses are refused, when an endpoint is created and after DNS resolution, so an endpoint cannot reach the server's own network. Comma-separated in the environment."`
	Proxy                 string         `koanf:"proxy" doc:"Egress proxy every webhook is sent through, as http://HOST:PORT (or https://HOST:PORT for TLS to the proxy), e.g. a filtering proxy such as smokescreen; empty sends directly. Every receiver, http:// or https://, is reached through a CONNECT tunnel, so TLS to the receiver runs end to end. The SSRF guard still applies: the receiver's name is resolved here and each address checked against webhook.allowed_networks before the proxy is asked for it, by IP. The proxy's own address is trusted because it is configured here, even on a private network. No credentials in the URL (refused): give them as webhook.proxy_username and webhook.proxy_password. HTTPS_PROXY, HTTP_PROXY and NO_PROXY are ignored."`
	ProxyUsername         string         `koanf:"proxy_username" doc:"User name for the proxy's basic authentication (Proxy-Authorization), sent to webhook.proxy only."`
	ProxyPassword         Secret         `koanf:"proxy_password" doc:"Password for the proxy's basic authentication, never shown or logged. Give it through FORMS_WEBHOOK_PROXY_PASSWORD or the config file, not a flag, which other users can see in the process list."`
}

// PluginsConfig is the plugin host's.
type PluginsConfig struct {
	Dir             string         `koanf:"dir" doc:"Directory of hymical-plugin-NAME executables; every one is run. Empty means the directory of the running hymical executable. The transports hymical ships (amqp, http, kafka, mqtt, nats, redis) are built into it and run as child processes of it (hymical plugin NAME); an executable of the same name here overrides the built-in, to run a newer or patched transport. hymical plugins list says which runs and from where."`
	SendGrace       time.Duration  `koanf:"send_grace" doc:"How long past a send's deadline the host waits for a plugin's answer before it counts the plugin as hung and restarts it."`
	StartTimeout    time.Duration  `koanf:"start_timeout" doc:"Time allowed to start and configure one plugin process."`
	ValidateTimeout time.Duration  `koanf:"validate_timeout" doc:"Time a plugin has to say whether it can send to an endpoint being created or changed; a plugin that takes longer counts as hung, is restarted, and the request is answered 503."`
	List            []PluginConfig `koanf:"list" doc:"Plugins to configure, in the config file only: each has a name (what endpoints name as their transport), an optional path (default: plugins.dir/hymical-plugin-NAME, or the built-in transport of that name when there is no such file), an optional sha256 pin (64 hex digits from a trusted source; a binary that does not match is not run; a built-in transport's pin is the hymical executable's) and settings (a map of strings for the plugin). The http plugin always runs and gets its timeouts, networks and proxy from the webhook section."`
}

// PluginConfig configures one plugin.
type PluginConfig struct {
	Name     string   `koanf:"name" doc:"What endpoints name as their transport, e.g. http."`
	Path     string   `koanf:"path" doc:"The executable; empty means plugins.dir/hymical-plugin-NAME, or the built-in transport of that name when there is no such file."`
	SHA256   string   `koanf:"sha256" doc:"Hex SHA-256 the executable must have; for a built-in transport, the hymical executable's."`
	Settings Settings `koanf:"settings" doc:"Handed to the plugin's Configure after every launch."`
}

// EndpointsConfig is endpoint health's, and the bounds of endpoints' own
// retry schedules.
type EndpointsConfig struct {
	DisableOnGone       bool          `koanf:"disable_on_gone" doc:"Off by default. On, a 410 Gone answer from an endpoint's receiver to the worker that owns the claim disables the endpoint at once (a superseded worker's 410 disables nothing): that attempt is recorded retryable (not the permanent failure the http transport reports for it) and the delivery is kept pending, held, with everything else for the endpoint, until an operator enables it again. Off, a 410 is an ordinary failed request, as its transport classifies it (the http transport: permanent, like any other 4xx)."`
	DisableAfterFailing time.Duration `koanf:"disable_after_failing" doc:"0, the default, never disables an endpoint for failing. Set, e.g. 120h, an endpoint every attempt to which has failed for this long is disabled: its deliveries are kept pending, held, until an operator enables it again, instead of being retried to the end of their allowance."`
	HealthInterval      time.Duration `koanf:"health_interval" doc:"How often each process looks for endpoints that have been failing for endpoints.disable_after_failing."`
	OperatorEndpoint    string        `koanf:"operator_endpoint" doc:"Id of an endpoint (ep_...) that gets a signed hymical.endpoint.disabled event whenever the server disables an endpoint on its own (endpoints.disable_on_gone or endpoints.disable_after_failing), delivered, retried and traced like any other. Empty tells no one; the log says it either way."`
	RetryMinDelay       time.Duration `koanf:"retry_min_delay" doc:"Shortest delay an endpoint's own retry_schedule may have."`
	RetryMaxDelay       time.Duration `koanf:"retry_max_delay" doc:"Longest delay an endpoint's own retry_schedule may have."`
	RetryMaxAttempts    int           `koanf:"retry_max_attempts" doc:"Most requests per cycle an endpoint's own retry_schedule may give a delivery (its delays plus one)."`
}

// RetentionConfig is the retention job's.
type RetentionConfig struct {
	DeliveredMaxAge time.Duration `koanf:"delivered_max_age" doc:"Remove a delivered delivery, its attempt history and replay records (and its event, once no delivery of it is left) this long after it was delivered, e.g. 720h for 30 days. 0 keeps everything. Failed, pending and processing deliveries are never removed. An idempotency key is remembered only as long as its event is kept."`
	Interval        time.Duration `koanf:"interval" doc:"How often the retention job runs. Each run removes in batches of 1000, one short transaction each, until nothing old is left; with several processes on one PostgreSQL they share the work without waiting on each other."`
}

// ConsoleConfig is the operator console's.
type ConsoleConfig struct {
	Enabled          bool          `koanf:"enabled" doc:"Serve the operator console at /console. It needs the admin token to log in (or insecure dev mode), like the API's admin routes."`
	TraceURLTemplate string        `koanf:"trace_url_template" doc:"Link from each attempt's trace id to your tracing UI: an http:// or https:// URL with {trace_id} where the id goes, e.g. https://jaeger.example.com/trace/{trace_id} or a Grafana Explore URL. Empty shows trace ids without a link."`
	SessionTTL       time.Duration `koanf:"session_ttl" doc:"How long a console login lasts. Sessions live in the memory of the process that made them: a restart logs everyone out, and behind a load balancer over several processes the console needs sticky sessions."`
}

// PortalConfig is the portal's: the console's pages for one scope of forms,
// opened with a single-use link the API makes.
type PortalConfig struct {
	Enabled        bool     `koanf:"enabled" doc:"Serve the portal at /portal: the endpoints and deliveries of a few forms, for the people who own them, opened with a single-use link from POST /v1/portal/sessions (admin only). Nothing opens it without such a link."`
	FrameAncestors []string `koanf:"frame_ancestors" doc:"The origins that may show the portal in a frame, for the CSP frame-ancestors directive: each an http(s) origin such as https://forms.example.com (a leading *. and a port allowed), or 'self'. Empty or 'none' forbids framing. Comma-separated in the environment. A framed portal needs HTTPS: its cookie is SameSite=None; Secure."`
	BrandName      string   `koanf:"brand_name" doc:"The name at the top of every portal page and in its titles, e.g. your product's. Empty shows \"Webhooks\"."`
	AccentColor    string   `koanf:"accent_color" doc:"The colour of the portal's links and buttons, #rgb or #rrggbb (e.g. #7c3aed). Empty keeps the console's blue."`
}

// TelemetryConfig is the OpenTelemetry set-up's.
type TelemetryConfig struct {
	Exporter           string   `koanf:"exporter" doc:"Where traces go: none (tracing off, the default), otlp-grpc or otlp-http (OTLP to a collector or a tracing backend), or stdout (one JSON span a line on standard output, for debugging). Plugins send their own spans to the same place."`
	Endpoint           string   `koanf:"endpoint" doc:"The OTLP collector for otlp-grpc and otlp-http: host:port (TLS unless telemetry.insecure), or an http:// or https:// URL; for otlp-http a URL without a path is sent to /v1/traces. Empty uses OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, then localhost:4317 (gRPC) or localhost:4318 (HTTP). Put credentials in OTEL_EXPORTER_OTLP_HEADERS, never here."`
	Insecure           bool     `koanf:"insecure" doc:"Send OTLP without TLS, e.g. to a collector on the same host or network. An http:// endpoint is plaintext anyway."`
	ServiceName        string   `koanf:"service_name" doc:"service.name of the server's spans and metrics; each plugin reports as SERVICE-plugin-NAME. OTEL_SERVICE_NAME overrides it."`
	ResourceAttributes []string `koanf:"resource_attributes" doc:"More resource attributes for spans and metrics, each key=value, e.g. deployment.environment=production. Comma-separated in the environment. OTEL_RESOURCE_ATTRIBUTES adds to them and wins on the same key."`
	Metrics            bool     `koanf:"metrics" doc:"Serve Prometheus metrics on GET /metrics of the API: deliveries by state, due deliveries (the queue depth), attempts by outcome and transport, late attempts, send and claim-to-send durations, plugin restarts."`
	MetricsPublic      bool     `koanf:"metrics_public" doc:"Let GET /metrics be scraped without a token. When false, the scraper sends the admin token as a bearer token. Metrics hold counts, never secrets, but they tell anyone who can reach them how busy the server is."`
}

// Settings is the telemetry set-up's configuration. The caller adds what
// only it knows: the service version, the stdout writer and the process
// environment.
func (t TelemetryConfig) Settings() telemetry.Config {
	var attrs map[string]string
	for _, kv := range t.ResourceAttributes {
		k, v, _ := strings.Cut(kv, "=")
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return telemetry.Config{
		Exporter:           telemetry.Exporter(t.Exporter),
		Endpoint:           t.Endpoint,
		Insecure:           t.Insecure,
		ServiceName:        t.ServiceName,
		ResourceAttributes: attrs,
		Metrics:            t.Metrics,
	}
}

// LogConfig is the server log's.
type LogConfig struct {
	Level  string `koanf:"level" doc:"Least severe record written: debug, info, warn or error."`
	Format string `koanf:"format" doc:"text (key=value lines, for people) or json (one object a line, for collectors)."`
}

// PluginHopMargin is what Worker adds to the webhook timeouts to get a
// send's deadline: time for the message to reach the plugin process and the
// outcome to come back. It is a fixed margin, not plugins.send_grace: the
// grace is how long the host waits past the deadline before calling a
// plugin hung, and must not lengthen the deadline the lease has to cover.
const PluginHopMargin = 2 * time.Second

// HTTPPlugin is the transport plugin that the webhook section configures.
const HTTPPlugin = "http"

// The settings PluginHost hands the http plugin. They are the plugin's own
// names (plugins/http/httptransport); a test holds the two together.
const (
	settingConnectTimeout  = "connect_timeout"
	settingReadTimeout     = "read_timeout"
	settingAllowedNetworks = "allowed_networks"
	settingProxy           = "proxy"
	settingProxyUsername   = "proxy_username"
	settingProxyPassword   = "proxy_password"
)

// Default is the configuration when nothing is set. It has no admin token,
// so it does not validate as it is; plugins.dir is left empty here, and
// Load turns that into the directory of the running executable.
func Default() Config {
	w := worker.DefaultConfig()
	return Config{
		Database: DatabaseConfig{URL: "sqlite:hymical.db"},
		Server: ServerConfig{
			Listen:              "127.0.0.1:8080",
			MaxBodyBytes:        faceopts.DefaultMaxBodyBytes,
			MaxNestingDepth:     faceopts.DefaultMaxNestingDepth,
			SecretRotationGrace: faceopts.DefaultSecretRotationGrace,
			ReadHeaderTimeout:   10 * time.Second,
			ReadTimeout:         30 * time.Second,
			WriteTimeout:        60 * time.Second,
			IdleTimeout:         60 * time.Second,
			MaxHeaderBytes:      64 << 10,
			AuthFailures:        authlimit.DefaultFailures,
			AuthFailureWindow:   authlimit.DefaultWindow,
			AuthFailureClients:  authlimit.DefaultClients,
		},
		Workers: WorkerConfig{
			LeaseSeconds:  int(w.Lease / time.Second),
			Concurrency:   w.Concurrency,
			EndpointShare: w.EndpointShare,
			BatchSize:     w.BatchSize,
			PollInterval:  w.PollInterval,
			MaxAttempts:   w.MaxCycleAttempts,
			RetryDelays:   slices.Clone(w.Retry.Delays),
			RetryJitter:   w.Retry.Jitter,
			MaxRetryAfter: w.Retry.MaxRetryAfter,
		},
		Webhook: WebhookConfig{
			ConnectTimeoutSeconds: 5,
			ReadTimeoutSeconds:    10,
		},
		Plugins: PluginsConfig{
			SendGrace:       pluginhost.DefaultSendGrace,
			StartTimeout:    pluginhost.DefaultStartTimeout,
			ValidateTimeout: pluginhost.DefaultValidateTimeout,
		},
		Log: LogConfig{Level: "info", Format: "text"},
		// Endpoint health is opt-in: with DisableOnGone false and
		// DisableAfterFailing 0 the server never disables an endpoint on its
		// own, so every sentence of the delivery-semantics page holds.
		Endpoints: EndpointsConfig{
			HealthInterval:   time.Minute,
			RetryMinDelay:    w.EndpointRetry.MinDelay,
			RetryMaxDelay:    w.EndpointRetry.MaxDelay,
			RetryMaxAttempts: w.EndpointRetry.MaxAttempts,
		},
		Retention: RetentionConfig{Interval: 10 * time.Minute},
		Console:   ConsoleConfig{Enabled: true, SessionTTL: faceopts.DefaultSessionTTL},
		Portal:    PortalConfig{Enabled: true},
		Telemetry: TelemetryConfig{Exporter: string(telemetry.ExporterNone), ServiceName: telemetry.DefaultServiceName},
	}
}

// ConnectTimeout is webhook.connect_timeout_seconds as a duration.
func (w WebhookConfig) ConnectTimeout() time.Duration {
	return time.Duration(w.ConnectTimeoutSeconds) * time.Second
}

// ReadTimeout is webhook.read_timeout_seconds as a duration.
func (w WebhookConfig) ReadTimeout() time.Duration {
	return time.Duration(w.ReadTimeoutSeconds) * time.Second
}

// Worker is the worker pool's configuration. Its SendTimeout is
// webhook.connect_timeout_seconds + webhook.read_timeout_seconds +
// PluginHopMargin (2 s), whatever plugins.send_grace is; a config that
// passed Load always gives a lease that outlasts it.
func (c Config) Worker() worker.Config {
	return worker.Config{
		Concurrency:      c.Workers.Concurrency,
		EndpointShare:    c.Workers.EndpointShare,
		BatchSize:        c.Workers.BatchSize,
		Lease:            time.Duration(c.Workers.LeaseSeconds) * time.Second,
		SendTimeout:      c.Webhook.ConnectTimeout() + c.Webhook.ReadTimeout() + PluginHopMargin,
		PollInterval:     c.Workers.PollInterval,
		MaxCycleAttempts: c.Workers.MaxAttempts,
		EndpointRetry: retrypolicy.EndpointBounds{
			MinDelay:    c.Endpoints.RetryMinDelay,
			MaxDelay:    c.Endpoints.RetryMaxDelay,
			MaxAttempts: c.Endpoints.RetryMaxAttempts,
		},
		Retry: worker.RetrySchedule{
			Delays:        slices.Clone(c.Workers.RetryDelays),
			Jitter:        c.Workers.RetryJitter,
			MaxRetryAfter: c.Workers.MaxRetryAfter,
		},
	}
}

// PluginHost is the plugin host's configuration. An empty plugins.dir is
// the directory of the running executable. The http plugin is always
// in its list (added when plugins.list does not name it), because the
// webhook section is its configuration: it gets connect_timeout and
// read_timeout as Go durations and allowed_networks comma-joined, and,
// when webhook.proxy is set, proxy with proxy_username and proxy_password
// (the one place the password is revealed: the plugin sends it to the
// proxy, and settings named password are never shown). They are merged
// with the settings plugins.list gives it. Load refuses those names in
// plugins.list, so nothing is overridden silently.
func (c Config) PluginHost() pluginhost.Config {
	nets := make([]string, len(c.Webhook.AllowedNetworks))
	for i, p := range c.Webhook.AllowedNetworks {
		nets[i] = p.String()
	}
	httpSettings := map[string]string{
		settingConnectTimeout:  c.Webhook.ConnectTimeout().String(),
		settingReadTimeout:     c.Webhook.ReadTimeout().String(),
		settingAllowedNetworks: strings.Join(nets, ","),
	}
	if c.Webhook.Proxy != "" {
		httpSettings[settingProxy] = c.Webhook.Proxy
		if c.Webhook.ProxyUsername != "" || c.Webhook.ProxyPassword != "" {
			httpSettings[settingProxyUsername] = c.Webhook.ProxyUsername
			httpSettings[settingProxyPassword] = c.Webhook.ProxyPassword.Reveal()
		}
	}
	// Load has already turned an empty plugins.dir into the executable's
	// directory; this does the same for a Config built in code, and leaves
	// it empty (the host then says what to set) if that cannot be found.
	dir, _ := resolvePluginDir(c.Plugins.Dir)
	out := pluginhost.Config{
		Dir:             dir,
		SendGrace:       c.Plugins.SendGrace,
		StartTimeout:    c.Plugins.StartTimeout,
		ValidateTimeout: c.Plugins.ValidateTimeout,
	}
	sawHTTP := false
	for _, p := range c.Plugins.List {
		settings := maps.Clone(map[string]string(p.Settings))
		if p.Name == HTTPPlugin {
			sawHTTP = true
			if settings == nil {
				settings = map[string]string{}
			}
			maps.Copy(settings, httpSettings)
		}
		out.Plugins = append(out.Plugins, pluginhost.PluginConfig{
			Name: p.Name, Path: p.Path, SHA256: p.SHA256, Settings: settings,
		})
	}
	if !sawHTTP {
		out.Plugins = append(out.Plugins, pluginhost.PluginConfig{Name: HTTPPlugin, Settings: httpSettings})
	}
	return out
}

// SlogLevel is log.level as a slog level; an unknown level is info.
func (l LogConfig) SlogLevel() slog.Level {
	switch l.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// NewLogger returns the server's logger, writing to w in log.format at
// log.level.
func (l LogConfig) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.SlogLevel()}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// redacted stands in for a secret wherever one would be shown.
const redacted = "[redacted]"

// Secret is a configuration value that must never be shown. String,
// GoString, LogValue and MarshalJSON all print "[redacted]" (or nothing,
// when it is empty), so a Secret that ends up in a log line, an error or a
// %v of its struct stays hidden. Reveal returns the value itself.
type Secret string

// Reveal returns the secret itself, for the one place that must use it.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the secret.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON keeps a JSON dump of the config from printing the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// DatabaseURL is database.url. It may hold a password, so String, GoString,
// LogValue and MarshalJSON show it with the password (and any secret-named
// query parameter, such as password=) redacted, and a URL that cannot be
// parsed is not shown at all. Reveal returns it whole, for opening the
// database.
type DatabaseURL string

// Reveal returns the URL itself, password included.
func (u DatabaseURL) Reveal() string { return string(u) }

func (u DatabaseURL) String() string {
	s := string(u)
	if s == "" || strings.HasPrefix(s, "sqlite:") {
		return s
	}
	parsed, err := url.Parse(s)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") || parsed.Opaque != "" {
		return redacted
	}
	if _, has := parsed.User.Password(); has {
		parsed.User = url.UserPassword(parsed.User.Username(), redacted)
	}
	if parsed.RawQuery != "" {
		q := parsed.Query()
		for k := range q {
			if redact.SecretName(k) {
				q[k] = []string{redacted}
			}
		}
		parsed.RawQuery = q.Encode()
	}
	parsed.Fragment, parsed.RawFragment = "", ""
	// The URL encoder escapes the brackets; put them back so the
	// placeholder reads the same everywhere.
	return strings.ReplaceAll(parsed.String(), url.QueryEscape(redacted), redacted)
}

// GoString keeps %#v from printing the password.
func (u DatabaseURL) GoString() string { return fmt.Sprintf("%q", u.String()) }

// LogValue implements slog.LogValuer.
func (u DatabaseURL) LogValue() slog.Value { return slog.StringValue(u.String()) }

// MarshalJSON keeps a JSON dump of the config from printing the password.
func (u DatabaseURL) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }

// Settings are a plugin's settings. Those whose names contain "secret",
// "token", "password", "passwd", "credential" or "key" (in any case), and
// passwords inside URL values, are redacted by String, GoString, LogValue
// and MarshalJSON.
type Settings map[string]string

// shown is the settings as they may be shown: secret-named values hidden,
// and the password of any URL among them.
func (s Settings) shown() map[string]string { return redact.Map(s) }

func (s Settings) String() string {
	shown := s.shown()
	keys := slices.Sorted(maps.Keys(shown))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + shown[k]
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// GoString keeps %#v from printing secret settings.
func (s Settings) GoString() string { return fmt.Sprintf("%#v", s.shown()) }

// LogValue implements slog.LogValuer.
func (s Settings) LogValue() slog.Value {
	shown := s.shown()
	attrs := make([]slog.Attr, 0, len(shown))
	for _, k := range slices.Sorted(maps.Keys(shown)) {
		attrs = append(attrs, slog.String(k, shown[k]))
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON keeps a JSON dump of the config from printing secret settings.
func (s Settings) MarshalJSON() ([]byte, error) { return json.Marshal(s.shown()) }

// String shows every key as key=value on one line, secrets redacted.
func (c Config) String() string {
	var b strings.Builder
	for i, f := range fields() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.key)
		b.WriteByte('=')
		b.WriteString(f.show(c))
	}
	return b.String()
}

// GoString keeps %#v from printing secrets.
func (c Config) GoString() string { return "config.Config{" + c.String() + "}" }

// LogValue implements slog.LogValuer: one group per section, secrets
// redacted, each plugin a group under plugins.list named by the plugin.
func (c Config) LogValue() slog.Value {
	var groups []slog.Attr
	var cur []slog.Attr
	section := ""
	flush := func() {
		if section != "" {
			groups = append(groups, slog.Attr{Key: section, Value: slog.GroupValue(cur...)})
		}
		cur = nil
	}
	for _, f := range fields() {
		if f.section != section {
			flush()
			section = f.section
		}
		name := f.key[len(f.section)+1:]
		if f.kind == kindPlugins {
			var ps []slog.Attr
			for _, p := range c.Plugins.List {
				ps = append(ps, slog.Group(p.Name, "path", p.Path, "sha256", p.SHA256, "settings", p.Settings))
			}
			cur = append(cur, slog.Attr{Key: name, Value: slog.GroupValue(ps...)})
			continue
		}
		switch f.kind {
		case kindBool, kindInt, kindInt64, kindFloat:
			// Numbers and flags stay typed, so a JSON log keeps them so.
			cur = append(cur, slog.Any(name, f.value(&c).Interface()))
		default:
			cur = append(cur, slog.String(name, f.show(c)))
		}
	}
	flush()
	return slog.GroupValue(groups...)
}

// String shows the database URL with its password redacted.
func (d DatabaseConfig) String() string { return "url=" + d.URL.String() }
