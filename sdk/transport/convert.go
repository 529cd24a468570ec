package transport

import (
	"fmt"
	"maps"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hymical/hymical/sdk/transport/transportpb"
)

// Every conversion between the generated protobuf types and this package's
// types lives in this file, so a new field is added in one place.

func settingsToProto(s Settings) *transportpb.ConfigureRequest {
	return &transportpb.ConfigureRequest{Settings: maps.Clone(s)}
}

func settingsFromProto(req *transportpb.ConfigureRequest) Settings {
	s := Settings(req.GetSettings())
	if s == nil {
		s = Settings{}
	}
	return s
}

func endpointToProto(e Endpoint) *transportpb.Endpoint {
	return &transportpb.Endpoint{Url: e.URL, Config: maps.Clone(e.Config)}
}

func endpointFromProto(e *transportpb.Endpoint) Endpoint {
	cfg := e.GetConfig()
	if cfg == nil {
		cfg = map[string]string{}
	}
	return Endpoint{URL: e.GetUrl(), Config: cfg}
}

// messageToProto builds the request for msg. When msg carries no deadline
// the context's, if any, is sent, so the plugin always learns the deadline
// the host will enforce.
//
// The request shares msg's body and endpoint config rather than copying
// them: it is encoded before the send call that takes it returns, so
// nothing else sees it, and a copy per message is measurable at the rate
// the host sends.
func messageToProto(msg Message, ctxDeadline time.Time) *transportpb.SendRequest {
	req := &transportpb.SendRequest{
		DeliveryId: msg.DeliveryID,
		Attempt:    clampUint32(msg.Attempt),
		Endpoint:   &transportpb.Endpoint{Url: msg.Endpoint.URL, Config: msg.Endpoint.Config},
		Body:       msg.Body,
	}
	if len(msg.Headers) > 0 {
		// One allocation for all the headers instead of one each.
		hs := make([]transportpb.Header, len(msg.Headers))
		req.Headers = make([]*transportpb.Header, len(msg.Headers))
		for i, h := range msg.Headers {
			hs[i].Name, hs[i].Value = h.Name, h.Value
			req.Headers[i] = &hs[i]
		}
	}
	deadline := msg.Deadline
	if deadline.IsZero() {
		deadline = ctxDeadline
	}
	if !deadline.IsZero() {
		req.Deadline = timestamppb.New(deadline)
	}
	return req
}

func messageFromProto(req *transportpb.SendRequest) Message {
	msg := Message{
		DeliveryID: req.GetDeliveryId(),
		Attempt:    int(req.GetAttempt()),
		Endpoint:   endpointFromProto(req.GetEndpoint()),
		Body:       req.GetBody(),
	}
	if len(req.GetHeaders()) > 0 {
		msg.Headers = make([]Header, len(req.GetHeaders()))
		for i, h := range req.GetHeaders() {
			msg.Headers[i] = Header{Name: h.GetName(), Value: h.GetValue()}
		}
	}
	if req.GetDeadline() != nil {
		msg.Deadline = req.GetDeadline().AsTime()
	}
	return msg
}

// kindToProto sends an invalid kind as UNSPECIFIED, which the host treats
// as retryable.
func kindToProto(k OutcomeKind) transportpb.OutcomeKind {
	switch k {
	case OutcomeDelivered:
		return transportpb.OutcomeKind_OUTCOME_KIND_DELIVERED
	case OutcomeRetryable:
		return transportpb.OutcomeKind_OUTCOME_KIND_RETRYABLE
	case OutcomePermanent:
		return transportpb.OutcomeKind_OUTCOME_KIND_PERMANENT
	}
	return transportpb.OutcomeKind_OUTCOME_KIND_UNSPECIFIED
}

func outcomeToProto(o Outcome) *transportpb.Outcome {
	out := &transportpb.Outcome{
		Kind:       kindToProto(o.Kind),
		StatusCode: clampUint32(o.StatusCode),
		Error:      BoundError(o.Error),
		NoRequest:  o.NoRequest && (o.Kind == OutcomeRetryable || o.Kind == OutcomePermanent),
	}
	if o.RetryAfter > 0 {
		out.RetryAfter = durationpb.New(o.RetryAfter)
	}
	return out
}

// outcomeFromProto reads a plugin's answer defensively: the plugin may not
// be written in Go or against this SDK, so nothing it sends is trusted to
// be in range.
func outcomeFromProto(p *transportpb.Outcome) Outcome {
	o := Outcome{Error: p.GetError(), StatusCode: int(p.GetStatusCode())}
	// A delivered message went out, whatever else the plugin says, and so
	// may have one of a kind the host does not know. A plugin that never
	// sets no_request (protocol 1, or an older SDK) reads as "a request may
	// have gone out", which records the attempt.
	switch p.GetKind() {
	case transportpb.OutcomeKind_OUTCOME_KIND_DELIVERED:
		o.Kind = OutcomeDelivered
	case transportpb.OutcomeKind_OUTCOME_KIND_RETRYABLE:
		o.Kind = OutcomeRetryable
		o.NoRequest = p.GetNoRequest()
	case transportpb.OutcomeKind_OUTCOME_KIND_PERMANENT:
		o.Kind = OutcomePermanent
		o.NoRequest = p.GetNoRequest()
	default:
		// Unknown is never taken as delivered or permanent: retrying keeps
		// the message, which at-least-once requires.
		o.Kind = OutcomeRetryable
		o.Error = fmt.Sprintf("plugin reported no valid outcome kind (%d), treated as retryable; plugin said: %s", p.GetKind(), o.Error)
	}
	if o.StatusCode != 0 && (o.StatusCode < 100 || o.StatusCode > 599) {
		o.Error = fmt.Sprintf("plugin reported status %d, outside 100-599, dropped; %s", o.StatusCode, o.Error)
		o.StatusCode = 0
	}
	if d := p.GetRetryAfter(); d != nil {
		if err := d.CheckValid(); err == nil && d.AsDuration() > 0 {
			o.RetryAfter = d.AsDuration()
		}
	}
	o.Error = BoundError(o.Error)
	return o
}

func clampUint32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
