package api

import (
	"errors"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// controlsSet reports whether c sets any control.
func controlsSet(c apiwire.EndpointControls) bool { return endpoint.Controls(c).Set() }

// controlCode is the error code of a wrong control, by its field.
func controlCode(field string) (apiwire.Code, bool) {
	switch field {
	case "rate_limit", "rate_burst":
		return apiwire.CodeInvalidRateLimit, true
	case "max_in_flight":
		return apiwire.CodeInvalidMaxInFlight, true
	case "retry_schedule":
		return apiwire.CodeInvalidRetrySchedule, true
	}
	return "", false
}

// applyControls writes the controls given onto e and checks the result
// with endpoint.ApplyControls, the console's rule set too, so an answer
// names what is wrong and what is allowed before the store does.
func applyControls(c apiwire.EndpointControls, e *storage.Endpoint, retry RetryBounds) error {
	err := endpoint.ApplyControls(endpoint.Controls(c), e, retry)
	var fe *endpoint.FieldError
	if errors.As(err, &fe) {
		if code, ok := controlCode(fe.Field); ok {
			return refuse(code, "%s", fe.Message)
		}
	}
	return err
}

// RetryBounds checks an endpoint's own retry schedule against the server's
// bounds (retrypolicy.EndpointBounds).
type RetryBounds = endpoint.RetryBounds

// durations writes a retry schedule the way the API reads it.
func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
