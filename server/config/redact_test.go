package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/config"
)

// Secrets planted in every place a secret can be given. Each is distinct
// and would not occur in any message by chance.
const (
	secretToken    = "admintok-PLANTED-7f3a9c2e41d8"
	secretIngest1  = "ingest-PLANTED-b2c4e6f8a0"
	secretIngest2  = "ingest-PLANTED-1a3b5c7d9e"
	secretDBPass   = "dbpass-PLANTED-5e7f9a1b3c"
	secretDBQuery  = "dbquery-PLANTED-8d6c4b2a0f"
	secretSetting1 = "settingtoken-PLANTED-0f1e2d3c"
	secretSetting2 = "settingsecret-PLANTED-4b5a6978"
	secretSetting3 = "settingpw-PLANTED-c3d2e1f0a9"
	secretSetting4 = "settingkey-PLANTED-9a8b7c6d5e"
	secretProxy    = "proxypass-PLANTED-6c5d4e3f2a"
	// secretKey is a valid secrets.key (base64 of 32 bytes), secretBadKey
	// one that is too short.
	secretKey    = "c2VjcmV0c2tleS1QTEFOVEVELTAxMjM0NTY3ODlhYmM="
	secretBadKey = "YmFka2V5LVBMQU5URUQtN2U2ZDVj"
)

var planted = []string{secretToken, secretIngest1, secretIngest2, secretDBPass, secretDBQuery,
	secretSetting1, secretSetting2, secretSetting3, secretSetting4, secretKey, secretBadKey, secretProxy}

// leaked returns the planted secrets that occur in any of the texts.
func leaked(texts ...string) []string {
	var out []string
	for _, s := range planted {
		// Half of a secret is as bad as the whole of it.
		if contains(s, texts...) || contains(s[:len(s)/2+1], texts...) || contains(s[len(s)/2:], texts...) {
			out = append(out, s)
		}
	}
	return out
}

// shows renders cfg every way a program might: String, fmt verbs on it and
// on its parts, slog text and JSON, and encoding/json.
func shows(t *testing.T, cfg config.Config) []string {
	t.Helper()
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("starting", "config", cfg, "server", cfg.Server, "db", cfg.Database.URL, "plugins", cfg.Plugins.List)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("starting", "config", cfg, "token", cfg.Server.AdminToken, "settings", cfg.Plugins.List[0].Settings)
	marshalled, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		cfg.String(), text.String(), js.String(), string(marshalled),
		fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%s %q", cfg, cfg),
		fmt.Sprintf("%v %+v %#v", cfg.Server, cfg.Server, cfg.Server),
		fmt.Sprintf("%v %+v %#v", cfg.Database, cfg.Database, cfg.Database),
		fmt.Sprintf("%v %+v %#v", cfg.Plugins, cfg.Plugins, cfg.Plugins),
		fmt.Sprintf("%v %+v %#v %s %q", cfg.Server.AdminToken, cfg.Server.AdminToken, cfg.Server.AdminToken, cfg.Server.AdminToken, cfg.Server.AdminToken),
		fmt.Sprintf("%v %s %q", cfg.Server.IngestKeys, cfg.Server.IngestKeys, cfg.Server.IngestKeys),
		fmt.Sprintf("%v %#v", cfg.Plugins.List[0].Settings, cfg.Plugins.List[0].Settings),
	}
}

const secretsFile = `
server:
  ingest_keys: ["` + secretIngest1 + `", "` + secretIngest2 + `"]
plugins:
  list:
    - name: nats
      settings:
        url: nats://nats.internal:4222
        auth_token: ` + secretSetting1 + `
        client_secret: ` + secretSetting2 + `
        Password: ` + secretSetting3 + `
        signing_key: ` + secretSetting4 + `
`

func TestSecretsAreNeverShown(t *testing.T) {
	t.Parallel()
	env := []string{
		"FORMS_SERVER_ADMIN_TOKEN=" + secretToken,
		"FORMS_DATABASE_URL=postgres://hymical:" + secretDBPass + "@db.internal:5432/hymical?sslmode=require&password=" + secretDBQuery,
		"FORMS_WORKER_LEASE_SECONDS=20", // a warning, to have one to check
		"FORMS_SECRETS_KEY=" + secretKey,
		"FORMS_WEBHOOK_PROXY=http://proxy.internal:3128",
		"FORMS_WEBHOOK_PROXY_USERNAME=hymical",
		"FORMS_WEBHOOK_PROXY_PASSWORD=" + secretProxy,
	}
	cfg, warnings := mustLoad(t, secretsFile, env, "--server.ingest_keys="+secretIngest1+","+secretIngest2)
	if cfg.Server.AdminToken.Reveal() != secretToken || cfg.Plugins.List[0].Settings["auth_token"] != secretSetting1 || cfg.Secrets.Key.Reveal() != secretKey {
		t.Fatal("the secrets were not loaded; the test would prove nothing")
	}
	if len(warnings) < 2 {
		t.Fatalf("want the lease and the flag warnings, got %q", warnings)
	}
	if cfg.Webhook.ProxyPassword.Reveal() != secretProxy {
		t.Fatal("the proxy password was not loaded; the test would prove nothing")
	}
	// The plugin host's configuration, which it may log, carries the
	// password to the plugin under a name that hides it.
	host := cfg.PluginHost()
	var hostLog bytes.Buffer
	for _, p := range host.Plugins {
		slog.New(slog.NewTextHandler(&hostLog, nil)).Info("plugin", "name", p.Name, "settings", config.Settings(p.Settings))
	}
	all := append(shows(t, cfg), warnings...)
	all = append(all, hostLog.String(), fmt.Sprintf("%v %+v", cfg.Webhook, cfg.Webhook))
	if l := leaked(all...); len(l) > 0 {
		t.Errorf("secrets shown: %q in:\n%s", l, strings.Join(all, "\n"))
	}
	// What is not secret is still shown, so the output is useful.
	for _, want := range []string{"hymical:[redacted]@db.internal:5432", "password=[redacted]", "sslmode=require", "nats://nats.internal:4222", "[redacted]", "127.0.0.1:8080", "http://proxy.internal:3128"} {
		if !contains(want, cfg.String()) {
			t.Errorf("String() = %q lacks %q", cfg.String(), want)
		}
	}
	var text bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("starting", "config", cfg)
	for _, want := range []string{"config.server.admin_token=[redacted]", "config.plugins.list.nats.settings.url=nats://nats.internal:4222", "config.worker.lease_seconds=20"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("slog output %q lacks %q", text.String(), want)
		}
	}
}

func TestSecretsAreNeverInErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
		args []string
	}{
		{name: "short admin token", env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + secretToken[:15]}},
		{name: "admin token with a newline", env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + secretToken + "\n"}},
		{name: "admin token in a misspelt variable", env: []string{"FORMS_SERVER_ADMIN_TOKN=" + secretToken}},
		{name: "admin token in a misspelt file key", file: "server:\n  admin_tokn: " + secretToken + "\n"},
		{name: "admin token in a misspelt flag", args: []string{"--server.admin_tokn=" + secretToken}},
		{name: "admin token in a malformed flag", args: []string{"---server.admin_token=" + secretToken}},
		{name: "admin token as a stray argument", args: []string{secretToken}},
		{name: "admin token as a list", file: "server:\n  admin_token: [" + secretToken + "]\n"},
		{name: "admin token as a map", file: "server:\n  admin_token:\n    " + secretToken + ": " + secretToken + "\n"},
		{name: "ingest key with a space", env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + secretToken}, file: "server:\n  ingest_keys: [\" " + secretIngest1 + "\"]\n"},
		{name: "ingest key that is the admin token", env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + secretToken, "FORMS_SERVER_INGEST_KEYS=" + secretToken}},
		{name: "ingest keys as a map", file: "server:\n  ingest_keys:\n    a: " + secretIngest1 + "\n"},
		{name: "unparseable database URL", env: []string{"FORMS_DATABASE_URL=postgres://u:" + secretDBPass + "@h:port/db"}},
		{name: "database URL with a bad escape in the password", env: []string{"FORMS_DATABASE_URL=postgres://u:%zz" + secretDBPass + "@h/db"}},
		{name: "unsupported database URL", env: []string{"FORMS_DATABASE_URL=mysql://u:" + secretDBPass + "@h/db"}},
		{name: "database URL without a scheme", env: []string{"FORMS_DATABASE_URL=" + secretDBPass}},
		{name: "secrets key too short", env: []string{"FORMS_SECRETS_KEY=" + secretBadKey}},
		{name: "secrets key and key file", env: []string{"FORMS_SECRETS_KEY=" + secretKey, "FORMS_SECRETS_KEY_FILE=/k"}},
		{name: "secrets key in a misspelt variable", env: []string{"FORMS_SECRETS_KYE=" + secretKey}},
		{name: "secret setting that is a map", file: "plugins:\n  list:\n    - name: nats\n      settings:\n        token:\n          v: " + secretSetting1 + "\n"},
		{name: "secret setting in a bad entry", file: "plugins:\n  list:\n    - name: NATS!\n      settings:\n        password: " + secretSetting3 + "\n"},
		{name: "secret in YAML that does not parse", file: "server:\n  admin_token: " + secretToken + "\n  ingest_keys: [" + secretIngest1 + "\n"},
		{name: "secret as the whole YAML document", file: secretToken + "\n"},
		{name: "proxy password in the proxy URL", env: []string{"FORMS_WEBHOOK_PROXY=http://hymical:" + secretProxy + "@proxy.internal:3128"}},
		{name: "proxy password in a proxy URL that does not parse", env: []string{"FORMS_WEBHOOK_PROXY=http://hymical:" + secretProxy + "@proxy.internal:port"}},
		{name: "proxy password in plugin settings", file: "plugins:\n  list:\n    - name: http\n      settings:\n        proxy_password: " + secretProxy + "\n"},
		{name: "many problems at once", file: secretsFile + "worker:\n  lease_seconds: -1\n",
			env: []string{"FORMS_SERVER_ADMIN_TOKEN=" + secretToken[:10], "FORMS_DATABASE_URL=postgres://u:" + secretDBPass + "@h:x/db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warnings, err := load(t, tt.file, tt.env, tt.args...)
			if err == nil {
				t.Fatal("accepted; the test would prove nothing")
			}
			all := append([]string{err.Error(), fmt.Sprintf("%+v", err)}, warnings...)
			if l := leaked(all...); len(l) > 0 {
				t.Errorf("secrets %q in: %s", l, strings.Join(all, "\n"))
			}
		})
	}
}

func TestSecretFlagsWarn(t *testing.T) {
	t.Parallel()
	_, warnings := mustLoad(t, "", nil, "--server.admin_token="+secretToken,
		"--database.url=postgres://u:"+secretDBPass+"@h/db", "--secrets.key="+secretKey,
		"--webhook.proxy=http://proxy.internal:3128", "--webhook.proxy_username=hymical", "--webhook.proxy_password="+secretProxy)
	joined := strings.Join(warnings, "\n")
	for _, want := range []string{"server.admin_token was given as a flag", "FORMS_SERVER_ADMIN_TOKEN", "database.url was given as a flag",
		"secrets.key was given as a flag", "FORMS_SECRETS_KEY", "webhook.proxy_password was given as a flag", "FORMS_WEBHOOK_PROXY_PASSWORD"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings %q lack %q", warnings, want)
		}
	}
	if l := leaked(joined); len(l) > 0 {
		t.Errorf("secrets %q in warnings", l)
	}
}

func TestSettingsHideURLPasswords(t *testing.T) {
	s := config.Settings{"url": "nats://forms:hunter2-s3cret@nats.internal:4222", "subject": "forms.new"}
	for _, shown := range []string{s.String(), fmt.Sprintf("%v", s), fmt.Sprintf("%#v", s)} {
		if strings.Contains(shown, "hunter2-s3cret") {
			t.Errorf("settings shown as %q", shown)
		}
		if !strings.Contains(shown, "nats.internal") || !strings.Contains(shown, "forms.new") {
			t.Errorf("settings lost what is not secret: %q", shown)
		}
	}
}
