package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hymical/hymical/server/config"
)

// In fuzz inputs, fileSecretMarker stands for fileSecret (and the short
// marker for a secret too short to be an admin token), so the seeds can put
// a secret in the file wherever one may go.
const (
	fileSecretMarker  = "@SECRET@"
	fileSecret        = "fzsecret-PLANTED-3e8a1c5b7d"
	shortSecretMarker = "@SHORT@"
	shortSecret       = "fzPLANTshort"
	envTokenSecret    = "fzenvtoken-PLANTED-6b0d2f4a8c"
	envIngestSecret   = "fzenvingest-PLANTED-9c1e3a5f7b"
	envDBSecret       = "fzenvdb-PLANTED-2d4f6b8a0e"
)

// FuzzLoad loads arbitrary YAML files. Load must never panic; what it
// accepts the worker must accept; and no secret may show in its error, its
// warnings or the loaded config's String, fmt, slog or JSON forms. It runs
// its seeds in every go test.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"sqlite.yaml", "postgres.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"null\n",
		"# only a comment\n",
		"server:\n  admin_token: " + fileSecretMarker + "-long-enough\n",
		"server:\n  admin_token: " + shortSecretMarker + "\n",
		"server:\n  admin_token: \"" + shortSecretMarker + "\\n\"\n  ingest_keys: [" + shortSecretMarker + "]\n",
		"server:\n  admin_token: " + fileSecretMarker + "\n  listen: nowhere\n",
		"server:\n  admin_token: [" + fileSecretMarker + "]\n",
		"server:\n  admin_token: {" + fileSecretMarker + ": 1}\n",
		"server:\n  admin_token: \" " + fileSecretMarker + "\"\n",
		"server:\n  admin_token: short\n  ingest_keys: [" + fileSecretMarker + ", \"\", 7]\n",
		"server.admin_token: " + fileSecretMarker + "\nserver.admin_tokn: x\n",
		"server:\n  ingest_keys: " + fileSecretMarker + "," + fileSecretMarker + "2\n  insecure_dev_mode: true\n",
		"database:\n  url: postgres://u:" + fileSecretMarker + "@h:5432/db?sslmode=require&password=" + fileSecretMarker + "\n",
		"database:\n  url: postgres://u:" + fileSecretMarker + "@h:port/db\n",
		"database:\n  url: postgres://u:%zz" + fileSecretMarker + "@h/db\n",
		"database:\n  url: mysql://u:" + fileSecretMarker + "@h/db\n",
		"database:\n  url: " + fileSecretMarker + "\n",
		"plugins:\n  list:\n    - name: nats\n      settings:\n        auth_token: " + fileSecretMarker + "\n        Password: " + fileSecretMarker + "\n        url: nats://n\n",
		"plugins:\n  list:\n    - name: nats\n      settings:\n        token: {a: " + fileSecretMarker + "}\n",
		"plugins:\n  list:\n    - name: BAD!\n      sha256: zz\n      settings:\n        client_secret: " + fileSecretMarker + "\n",
		"plugins:\n  list: [{name: http, settings: {connect_timeout: 1s, api_key: " + fileSecretMarker + "}}]\n",
		"plugins:\n  list:\n    http: {}\n",
		"plugins:\n  list:\n    - 5\n    - [a]\n    - {name: x, nme: y}\n",
		"server: {admin_token: \"" + fileSecretMarker + "\n",
		"worker: 5\n",
		"worker:\n  lease_seconds: 1e400\n  retry_jitter: .inf\n  concurrency: 99999999999999999999999\n",
		"worker:\n  lease_seconds: 16\n  poll_interval: 5\n  retry_delays: [1s, -1s, x, {a: b}]\n",
		"webhook:\n  allowed_networks: [0.0.0.0/0, 10.0.0.0/33, fe80::1%eth0]\n",
		"log:\n  level: LOUD\n  format: [json]\n",
		"- a\n- b\n",
		"a: &x {b: *x}\n",
		"? [a, b]\n: c\n",
		"1: 2\ntrue: false\n",
		"server:\n  admin_token: !!binary ZnpzZWNyZXQ=\n",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		text := strings.ReplaceAll(string(data), fileSecretMarker, fileSecret)
		text = strings.ReplaceAll(text, shortSecretMarker, shortSecret)
		path := filepath.Join(t.TempDir(), "fuzz.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}

		// With secrets in the environment: none may show. The file could
		// hold one of them only by a fuzzer's fluke, which is skipped.
		env := []string{
			"FORMS_SERVER_ADMIN_TOKEN=" + envTokenSecret,
			"FORMS_SERVER_INGEST_KEYS=" + envIngestSecret + ",fz-other-ingest-key",
			"FORMS_DATABASE_URL=postgres://hymical:" + envDBSecret + "@db.internal/hymical",
		}
		shown := loadAndShow(t, path, env)
		for _, s := range []string{envTokenSecret, envIngestSecret, envDBSecret} {
			if !strings.Contains(text, s) && contains(s, shown...) {
				t.Errorf("environment secret %q shown in:\n%s", s, strings.Join(shown, "\n"))
			}
		}

		// With the environment empty the file's own secrets are used; the
		// planted one may show only when the file also has it somewhere
		// that is not secret (a log level, a key name, a comment the
		// parser quotes).
		shown = loadAndShow(t, path, nil)
		for _, s := range []string{fileSecret, shortSecret} {
			if onlyInSecretPositions(text, s) && contains(s, shown...) {
				t.Errorf("file secret %q shown in:\n%s", s, strings.Join(shown, "\n"))
			}
		}
	})
}

// loadAndShow loads the file and returns every text a program could show
// afterwards: the error, or the config's renderings, and the warnings.
func loadAndShow(t *testing.T, path string, env []string) []string {
	t.Helper()
	cfg, warnings, err := config.Load(config.LoadOptions{ConfigFile: path, Environ: env})
	shown := append([]string(nil), warnings...)
	if err != nil {
		return append(shown, err.Error(), fmt.Sprintf("%+v", err))
	}
	if _, verr := cfg.Validate(); verr != nil {
		t.Errorf("Load accepted what Validate refuses: %v", verr)
	}
	if werr := cfg.Worker().Validate(); werr != nil {
		t.Errorf("Load accepted what the worker refuses: %v", werr)
	}
	_ = cfg.PluginHost()
	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("config", "config", cfg)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("config", "config", cfg)
	marshalled, err := json.Marshal(cfg)
	if err != nil {
		t.Errorf("json.Marshal: %v", err)
	}
	return append(shown, cfg.String(), text.String(), js.String(), string(marshalled),
		fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg),
		fmt.Sprintf("%v %+v", cfg.Server, cfg.Plugins), fmt.Sprintf("%v", cfg.Database))
}

// onlyInSecretPositions reports whether the YAML text parses and every
// occurrence of s in its keys and values is in a place that holds a secret:
// server.admin_token, server.ingest_keys, the password (or a secret-named
// query parameter) of a PostgreSQL database.url, all of a database.url that
// is not a readable PostgreSQL or SQLite URL, and plugin settings with
// secret-looking names. It reads the YAML independently of the loader.
func onlyInSecretPositions(text, s string) bool {
	if !strings.Contains(text, s) {
		return false
	}
	var doc any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return false
	}
	var all, secret int
	count := func(v string, isSecret bool) {
		n := strings.Count(v, s)
		all += n
		if isSecret {
			secret += n
		}
	}
	var walk func(path string, v any, isSecret bool)
	walk = func(path string, v any, isSecret bool) {
		switch path {
		case "server.admin_token", "server.ingest_keys":
			isSecret = true
		}
		switch x := v.(type) {
		case map[string]any:
			for k, v := range x {
				count(k, isSecret)
				walk(join(path, k), v, isSecret)
			}
		case map[any]any:
			for k, v := range x {
				count(fmt.Sprint(k), isSecret)
				walk(join(path, fmt.Sprint(k)), v, isSecret)
			}
		case []any:
			for _, it := range x {
				if path == "plugins.list" {
					walkPlugin(it, count, walk)
					continue
				}
				walk(path+"[]", it, isSecret)
			}
		case string:
			if path == "database.url" && !isSecret {
				countURL(x, count)
				return
			}
			count(x, isSecret)
		default:
			count(fmt.Sprint(x), isSecret)
		}
	}
	walk("", doc, false)
	return all > 0 && all == secret
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// walkPlugin counts one plugins.list entry: its settings are secret when
// their names say so.
func walkPlugin(entry any, count func(string, bool), walk func(string, any, bool)) {
	m, ok := entry.(map[string]any)
	if !ok {
		walk("plugins.list[]", entry, false)
		return
	}
	for k, v := range m {
		count(k, false)
		settings, ok := v.(map[string]any)
		if k != "settings" || !ok {
			walk("plugins.list[]."+k, v, false)
			continue
		}
		for name, value := range settings {
			count(name, false)
			walk("plugins.list[].settings."+name, value, secretName(name))
		}
	}
}

func secretName(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"secret", "token", "password", "key"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// countURL counts a database URL: a readable PostgreSQL URL is shown with
// its password and secret-named query values redacted, a SQLite URL is
// shown whole, and anything else is never shown. Only the decoded parts
// are counted: those are what a redacted URL is rebuilt from.
func countURL(raw string, count func(string, bool)) {
	if strings.HasPrefix(raw, "sqlite:") {
		count(raw, false)
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Opaque != "" {
		count(raw, true)
		return
	}
	pass, _ := u.User.Password()
	count(pass, true)
	count(u.User.Username(), false)
	count(u.Host, false)
	count(u.Path, false)
	count(u.Fragment, false)
	for k, vs := range u.Query() {
		count(k, false)
		for _, v := range vs {
			count(v, secretName(k))
		}
	}
}
