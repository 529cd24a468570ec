package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// fakeHost records what it was sent and answers with out.
type fakeHost struct {
	out      transport.Outcome
	plugin   string
	msg      transport.Message
	deadline time.Time
}

func (f *fakeHost) Send(_ context.Context, plugin string, msg transport.Message, deadline time.Time) transport.Outcome {
	f.plugin, f.msg, f.deadline = plugin, msg, deadline
	return f.out
}

// The plugin worker hands the http plugin the message hymical's worker
// would, signed with the endpoint's secret, and fails the job (so River
// retries it) unless the message was delivered.
func TestPluginWorkerSendsASignedMessageAndFailsUndelivered(t *testing.T) {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"submission.received"}`)
	job := &river.Job[deliveryArgs]{
		JobRow: &rivertype.JobRow{Attempt: 2},
		Args:   deliveryArgs{Delivery: "dlv_7_1", Endpoint: 1, Body: body},
	}
	for _, tc := range []struct {
		out     transport.Outcome
		wantErr bool
	}{
		{transport.Delivered(204), false},
		{transport.Retryable(503, "receiver answered 503"), true},
		{transport.Permanent(400, "receiver answered 400"), true},
	} {
		host := &fakeHost{out: tc.out}
		w := &pluginWorker{host: host, timeout: time.Minute, endpoints: []endpoint{
			{url: "http://127.0.0.1:1/0", secret: "unused"},
			{url: "http://127.0.0.1:1/1", secret: secret},
		}}
		err := w.Work(context.Background(), job)
		if (err != nil) != tc.wantErr {
			t.Errorf("outcome %s: Work() = %v, want an error: %t", tc.out.Kind, err, tc.wantErr)
		}
		m := host.msg
		if host.plugin != "http" || m.DeliveryID != "dlv_7_1" || m.Attempt != 2 || m.Endpoint.URL != "http://127.0.0.1:1/1" || string(m.Body) != string(body) {
			t.Errorf("sent %+v to plugin %q", m, host.plugin)
		}
		if d := time.Until(host.deadline); d <= 0 || d > time.Minute {
			t.Errorf("deadline %s from now, want within the worker's timeout", d)
		}
		h := http.Header{}
		for _, kv := range m.Headers {
			h.Add(kv.Name, kv.Value)
		}
		if err := webhook.Verify(h, m.Body, secret); err != nil {
			t.Errorf("the message does not verify with the endpoint's secret: %v", err)
		}
	}
}
