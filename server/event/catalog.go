package event

import "encoding/json"

// Kind is one entry of the catalog of what the server emits.
type Kind struct {
	Type string
	// Description is one line a portal can show next to the type.
	Description string
	// Example is a body of this type as receivers get it. Its fields are
	// held to the builder's by a test (TestCatalogExamplesMatchTheBuilders),
	// so the catalog cannot promise a field the server does not send.
	Example json.RawMessage
}

// Catalog lists the event types the server itself makes, in a fixed
// order. Types a caller posts through POST /v1/events are the caller's
// own and are not listed: the server knows nothing of them beyond what
// it was sent.
func Catalog() []Kind {
	return []Kind{
		{
			Type:        TypeSubmissionReceived,
			Description: "A form was submitted; submission.id is stable across every attempt and replay, so dedupe on it.",
			Example:     json.RawMessage(`{"type":"submission.received","submission":{"id":"sub_0123456789abcdef0123456789abcdef","form_id":"contact","data":{"email":"ada@example.com","message":"Hello"},"created_at":"2026-01-02T03:04:05.678Z"}}`),
		},
		{
			Type:        TypeEndpointDisabled,
			Description: "Sent to endpoints.operator_endpoint when the server disables an endpoint on its own (410 Gone, or failing too long).",
			Example:     json.RawMessage(`{"type":"hymical.endpoint.disabled","endpoint":{"id":"ep_0123456789abcdef0123456789abcdef","url":"https://hooks.example.com/forms","reason":"gone","disabled_at":"2026-01-02T03:04:05.678Z","failing_since":"2026-01-01T03:04:05.678Z"}}`),
		},
		{
			Type:        TypeTest,
			Description: "Sent to one endpoint by POST /v1/endpoints/{id}/test, to check its receiver; event.test is always true.",
			Example:     json.RawMessage(`{"type":"hymical.test","event":{"id":"evt_0123456789abcdef0123456789abcdef","endpoint_id":"ep_0123456789abcdef0123456789abcdef","test":true,"created_at":"2026-01-02T03:04:05.678Z"}}`),
		},
	}
}
