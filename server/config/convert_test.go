package config_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/hymical/hymical/plugins/http/httptransport"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/pluginhost"
	"github.com/hymical/hymical/server/retrypolicy"
	"github.com/hymical/hymical/server/worker"
)

func TestWorkerConversion(t *testing.T) {
	t.Parallel()
	t.Run("the defaults are the worker's defaults", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "", withToken())
		if got, want := cfg.Worker(), worker.DefaultConfig(); !reflect.DeepEqual(got, want) {
			t.Errorf("Worker() = %+v, want worker.DefaultConfig() %+v", got, want)
		}
	})
	t.Run("every key reaches the worker", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, `
worker:
  lease_seconds: 45
  concurrency: 3
  endpoint_share: 0.5
  batch_size: 2
  poll_interval: 250ms
  max_attempts: 8
  retry_delays: [1s, 1m]
  retry_jitter: 0.1
  max_retry_after: 5m
webhook:
  connect_timeout_seconds: 3
  read_timeout_seconds: 7
plugins:
  send_grace: 9s
endpoints:
  retry_min_delay: 2s
  retry_max_delay: 3h
  retry_max_attempts: 12
`, withToken())
		want := worker.Config{
			Concurrency: 3, EndpointShare: 0.5, BatchSize: 2, Lease: 45 * time.Second,
			// 3 s connect + 7 s read + the fixed 2 s margin; send_grace
			// does not lengthen it.
			SendTimeout:  12 * time.Second,
			PollInterval: 250 * time.Millisecond, MaxCycleAttempts: 8,
			Retry:         worker.RetrySchedule{Delays: []time.Duration{time.Second, time.Minute}, Jitter: 0.1, MaxRetryAfter: 5 * time.Minute},
			EndpointRetry: retrypolicy.EndpointBounds{MinDelay: 2 * time.Second, MaxDelay: 3 * time.Hour, MaxAttempts: 12},
		}
		got := cfg.Worker()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Worker() = %+v, want %+v", got, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("the worker refuses it: %v", err)
		}
		got.Retry.Delays[0] = time.Hour
		if cfg.Workers.RetryDelays[0] != time.Second {
			t.Error("Worker() shares the retry delays with the Config")
		}
	})
}

func TestPluginHostConversion(t *testing.T) {
	t.Parallel()
	t.Run("the http plugin is always configured from the webhook section", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "", withToken("FORMS_PLUGINS_DIR=/opt/plugins", "FORMS_PLUGINS_SEND_GRACE=3s"))
		want := pluginhost.Config{
			Dir: "/opt/plugins",
			Plugins: []pluginhost.PluginConfig{{Name: "http", Settings: map[string]string{
				"connect_timeout": "5s", "read_timeout": "10s", "allowed_networks": "",
			}}},
			SendGrace:       3 * time.Second,
			StartTimeout:    pluginhost.DefaultStartTimeout,
			ValidateTimeout: pluginhost.DefaultValidateTimeout,
		}
		if got := cfg.PluginHost(); !reflect.DeepEqual(got, want) {
			t.Errorf("PluginHost() = %+v, want %+v", got, want)
		}
	})
	t.Run("operator settings are merged and other plugins pass through", func(t *testing.T) {
		t.Parallel()
		pin := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		cfg, _ := mustLoad(t, `
webhook:
  connect_timeout_seconds: 2
  read_timeout_seconds: 30
  allowed_networks: [10.0.0.0/8, "127.0.0.1", "fd00::/8"]
plugins:
  list:
    - name: nats
      path: /opt/nats
      settings: {url: "nats://n:4222"}
    - name: http
      sha256: `+pin+`
      settings: {user_agent: Acme/1}
`, withToken())
		got := cfg.PluginHost()
		want := []pluginhost.PluginConfig{
			{Name: "nats", Path: "/opt/nats", Settings: map[string]string{"url": "nats://n:4222"}},
			{Name: "http", SHA256: pin, Settings: map[string]string{
				"user_agent": "Acme/1", "connect_timeout": "2s", "read_timeout": "30s",
				"allowed_networks": "10.0.0.0/8,127.0.0.1/32,fd00::/8",
			}},
		}
		if !reflect.DeepEqual(got.Plugins, want) {
			t.Errorf("PluginHost().Plugins = %+v, want %+v", got.Plugins, want)
		}
		got.Plugins[0].Settings["url"] = "changed"
		if cfg.Plugins.List[0].Settings["url"] != "nats://n:4222" {
			t.Error("PluginHost() shares settings maps with the Config")
		}
	})
	t.Run("the proxy and its credentials reach the http plugin", func(t *testing.T) {
		t.Parallel()
		cfg, _ := mustLoad(t, "webhook:\n  proxy: http://smokescreen.internal:4750\n",
			withToken("FORMS_WEBHOOK_PROXY_USERNAME=hymical", "FORMS_WEBHOOK_PROXY_PASSWORD=egress-pass"))
		got := cfg.PluginHost().Plugins
		want := map[string]string{"connect_timeout": "5s", "read_timeout": "10s", "allowed_networks": "",
			"proxy": "http://smokescreen.internal:4750", "proxy_username": "hymical", "proxy_password": "egress-pass"}
		if len(got) != 1 || !reflect.DeepEqual(got[0].Settings, want) {
			t.Errorf("PluginHost().Plugins = %+v, want the http plugin with %v", got, want)
		}
	})
	t.Run("the webhook timeouts default to the http plugin's own", func(t *testing.T) {
		t.Parallel()
		// The plugin is another program and falls back to its defaults
		// only for a host that sends no timeouts; this host always sends
		// them, and they must not differ from what the plugin documents.
		w := config.Default().Webhook
		if w.ConnectTimeout() != httptransport.DefaultConnectTimeout || w.ReadTimeout() != httptransport.DefaultReadTimeout {
			t.Errorf("default webhook timeouts %s and %s, the http plugin's %s and %s",
				w.ConnectTimeout(), w.ReadTimeout(), httptransport.DefaultConnectTimeout, httptransport.DefaultReadTimeout)
		}
	})
	t.Run("the real http plugin accepts the settings", func(t *testing.T) {
		t.Parallel()
		// httptransport refuses unknown names and unreadable values, so
		// this holds the names and formats to the plugin's own.
		for _, env := range [][]string{
			nil,
			{"FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS=1", "FORMS_WEBHOOK_READ_TIMEOUT_SECONDS=3600", "FORMS_WORKER_LEASE_SECONDS=7300", "FORMS_WEBHOOK_ALLOWED_NETWORKS=10.0.0.0/8,::1,192.168.1.7"},
			{"FORMS_WEBHOOK_PROXY=https://proxy.internal:3129/", "FORMS_WEBHOOK_PROXY_USERNAME=hymical", "FORMS_WEBHOOK_PROXY_PASSWORD=egress-pass"},
		} {
			cfg, _ := mustLoad(t, "", withToken(env...))
			var settings map[string]string
			for _, p := range cfg.PluginHost().Plugins {
				if p.Name == config.HTTPPlugin {
					settings = p.Settings
				}
			}
			if err := httptransport.New(httptransport.Options{}).Configure(context.Background(), settings); err != nil {
				t.Errorf("the http plugin refuses %v: %v", settings, err)
			}
		}
	})
}
