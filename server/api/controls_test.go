package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hymical/hymical/server/api"
	"github.com/hymical/hymical/server/retrypolicy"
)

func TestEndpointControls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, func(o *api.Options) {
			o.RetryBounds = retrypolicy.EndpointBounds{MinDelay: time.Second, MaxDelay: time.Hour, MaxAttempts: 4}
		})
		created := f.admin("POST", "/v1/endpoints", map[string]any{
			"url":            "https://hooks.example.com/in",
			"rate_limit":     2.5,
			"rate_burst":     5,
			"max_in_flight":  3,
			"ordered":        true,
			"retry_schedule": []string{"10s", "1m", "1h"},
		}).must(t, http.StatusCreated)
		id := created.str("id")
		got := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
		for key, want := range map[string]any{
			"rate_limit": 2.5, "rate_burst": 5.0, "max_in_flight": 3.0, "ordered": true,
			"retry_schedule": "[10s 1m0s 1h0m0s]", "disabled_reason": "", "failing_since": nil,
		} {
			v := got.body[key]
			if key == "retry_schedule" {
				v = fmt.Sprint(v)
			}
			if v != want {
				t.Errorf("%s = %v, want %v: %s", key, v, want, got.raw)
			}
		}

		tests := []struct {
			name  string
			patch map[string]any
			code  string
			says  []string
		}{
			{"a delay that is no duration", map[string]any{"retry_schedule": []string{"10s", "soon"}}, "invalid_retry_schedule", []string{"item 2", `"soon"`, "30s"}},
			{"a delay under the server's floor", map[string]any{"retry_schedule": []string{"100ms"}}, "invalid_retry_schedule", []string{"delay 1", "from 1s to 1h0m0s"}},
			{"more attempts than the server allows", map[string]any{"retry_schedule": []string{"1s", "1s", "1s", "1s"}}, "invalid_retry_schedule", []string{"5 attempts", "at most 4"}},
			{"a negative rate", map[string]any{"rate_limit": -1}, "invalid_rate_limit", []string{"0 (no limit)"}},
			{"a burst without a rate", map[string]any{"rate_limit": 0, "rate_burst": 3}, "invalid_rate_limit", []string{"rate_burst is set but rate_limit is not"}},
			{"a negative cap", map[string]any{"max_in_flight": -2}, "invalid_max_in_flight", []string{"0 (no cap)"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := f.admin("PATCH", "/v1/endpoints/"+id, tt.patch).must(t, http.StatusUnprocessableEntity)
				code, msg := r.errorCode(t)
				if code != tt.code {
					t.Errorf("code %q, want %q (%s)", code, tt.code, msg)
				}
				for _, s := range tt.says {
					if !strings.Contains(msg, s) {
						t.Errorf("message %q does not say %q", msg, s)
					}
				}
			})
		}
		after := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
		if after.str("updated_at") != got.str("updated_at") {
			t.Fatal("a refused PATCH changed the endpoint")
		}

		cleared := f.admin("PATCH", "/v1/endpoints/"+id, map[string]any{
			"retry_schedule": []string{}, "ordered": false, "rate_limit": 0, "rate_burst": 0, "max_in_flight": 0,
		}).must(t, http.StatusOK)
		if fmt.Sprint(cleared.body["retry_schedule"]) != "[]" || cleared.body["ordered"] != false || cleared.body["rate_limit"] != 0.0 {
			t.Fatalf("after clearing the controls: %s", cleared.raw)
		}

		// Disabling through the API says the operator did it, and the
		// deliveries it holds say so too.
		f.admin("POST", "/v1/endpoints/"+id+"/disable", nil).must(t, http.StatusOK)
		off := f.admin("GET", "/v1/endpoints/"+id, nil).must(t, http.StatusOK)
		if off.str("disabled_reason") != "operator" {
			t.Fatalf("disabled_reason = %q, want operator", off.str("disabled_reason"))
		}
		sub := f.submit("contact", map[string]any{"a": 1}).must(t, http.StatusAccepted)
		d := f.admin("GET", "/v1/deliveries/"+fmt.Sprint(sub.list("deliveries")[0]), nil).must(t, http.StatusOK)
		if !strings.Contains(string(d.raw), `"held":true`) {
			t.Fatalf("a delivery to a disabled endpoint does not show held: %s", d.raw)
		}
	})
}
