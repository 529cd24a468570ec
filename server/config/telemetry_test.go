package config_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/telemetry"
)

func TestTelemetrySettings(t *testing.T) {
	t.Parallel()
	cfg, warnings := mustLoad(t, `
telemetry:
  exporter: otlp-http
  endpoint: https://otlp.example.com
  service_name: forms
  resource_attributes: [deployment.environment=production, "team = forms"]
  metrics: true
`, withToken())
	if len(warnings) > 0 {
		t.Errorf("warnings: %q", warnings)
	}
	got := cfg.Telemetry.Settings()
	want := telemetry.Config{
		Exporter: telemetry.ExporterOTLPHTTP, Endpoint: "https://otlp.example.com", ServiceName: "forms", Metrics: true,
		ResourceAttributes: map[string]string{"deployment.environment": "production", "team": "forms"},
	}
	if got.Exporter != want.Exporter || got.Endpoint != want.Endpoint || got.ServiceName != want.ServiceName ||
		got.Metrics != want.Metrics || got.Insecure || !maps.Equal(got.ResourceAttributes, want.ResourceAttributes) {
		t.Errorf("Settings() = %+v, want %+v", got, want)
	}
	if def := config.Default().Telemetry.Settings(); def.Exporter != telemetry.ExporterNone || def.Metrics || def.ResourceAttributes != nil {
		t.Errorf("the default turns telemetry on: %+v", def)
	}
}

func TestTelemetryValuesAreChecked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		env  []string
		key  string
		want []string
	}{
		{name: "unknown exporter", env: []string{"FORMS_TELEMETRY_EXPORTER=jaeger"}, key: "telemetry.exporter",
			want: []string{`"jaeger"`, "none, otlp-grpc, otlp-http or stdout", "FORMS_TELEMETRY_EXPORTER"}},
		{name: "endpoint without a port", file: "telemetry:\n  exporter: otlp-grpc\n  endpoint: collector\n", key: "telemetry.endpoint",
			want: []string{"host:port", "config file"}},
		{name: "endpoint with another scheme", env: []string{"FORMS_TELEMETRY_EXPORTER=otlp-grpc", "FORMS_TELEMETRY_ENDPOINT=grpc://c:4317"},
			key: "telemetry.endpoint", want: []string{"http:// or https://"}},
		{name: "insecure https", env: []string{"FORMS_TELEMETRY_EXPORTER=otlp-http", "FORMS_TELEMETRY_ENDPOINT=https://c:4318", "FORMS_TELEMETRY_INSECURE=true"},
			key: "telemetry.endpoint", want: []string{"insecure"}},
		{name: "empty service name", file: "telemetry:\n  service_name: \"  \"\n", key: "telemetry.service_name", want: []string{"empty", "hymical"}},
		{name: "attribute without a value", env: []string{"FORMS_TELEMETRY_RESOURCE_ATTRIBUTES=team"}, key: "telemetry.resource_attributes",
			want: []string{"item 1", "key=value"}},
		{name: "attribute with an empty key", file: "telemetry:\n  resource_attributes: [\"=x\"]\n", key: "telemetry.resource_attributes", want: []string{"key=value"}},
		{name: "attribute key with a space", file: "telemetry:\n  resource_attributes: [\"team name=x\"]\n", key: "telemetry.resource_attributes", want: []string{"white space"}},
		{name: "service.name as an attribute", env: []string{"FORMS_TELEMETRY_RESOURCE_ATTRIBUTES=service.name=x"}, key: "telemetry.resource_attributes",
			want: []string{"telemetry.service_name"}},
		{name: "an attribute twice", env: []string{"FORMS_TELEMETRY_RESOURCE_ATTRIBUTES=a=1,a=2"}, key: "telemetry.resource_attributes", want: []string{"items 1 and 2"}},
		{name: "attributes as a map", file: "telemetry:\n  resource_attributes:\n    team: forms\n", key: "telemetry.resource_attributes", want: []string{"list"}},
		{name: "metrics not a bool", env: []string{"FORMS_TELEMETRY_METRICS=yes please"}, key: "telemetry.metrics", want: []string{"true or false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := load(t, tt.file, withToken(tt.env...))
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			p := problemFor(t, err, tt.key)
			for _, w := range append(tt.want, tt.key) {
				if !strings.Contains(p.Message, w) {
					t.Errorf("message %q does not say %q", p.Message, w)
				}
			}
		})
	}
}

func TestTelemetryEndpointCredentialsAreNeverShown(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"https://user:" + secretToken + "@collector:4318", "user:" + secretToken + "@collector:4317"} {
		_, _, err := load(t, "", withToken("FORMS_TELEMETRY_EXPORTER=otlp-grpc", "FORMS_TELEMETRY_ENDPOINT="+endpoint))
		p := problemFor(t, err, "telemetry.endpoint")
		if l := leaked(err.Error(), p.Message); len(l) > 0 {
			t.Errorf("the error shows the endpoint's password: %v", err)
		}
		if !strings.Contains(p.Message, "OTEL_EXPORTER_OTLP_HEADERS") {
			t.Errorf("message %q does not say where credentials go", p.Message)
		}
	}
}

func TestTelemetryWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"an endpoint nothing sends to", []string{"FORMS_TELEMETRY_ENDPOINT=collector:4317"}, "telemetry.endpoint is set but telemetry.exporter is none"},
		{"public metrics that are off", []string{"FORMS_TELEMETRY_METRICS_PUBLIC=true"}, "telemetry.metrics_public is true but telemetry.metrics is false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, warnings := mustLoad(t, "", withToken(tt.env...))
			if !contains(tt.want, warnings...) {
				t.Errorf("warnings %q lack %q", warnings, tt.want)
			}
		})
	}
	_, warnings := mustLoad(t, "", withToken("FORMS_TELEMETRY_EXPORTER=stdout", "FORMS_TELEMETRY_METRICS=true", "FORMS_TELEMETRY_METRICS_PUBLIC=true"))
	if len(warnings) > 0 {
		t.Errorf("warnings for a sound telemetry config: %q", warnings)
	}
}
