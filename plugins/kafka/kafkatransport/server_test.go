package kafkatransport

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
)

// These tests run against kfake, franz-go's in-process cluster that speaks
// the Kafka wire protocol on loopback; no Kafka broker is packaged here.

const topic = "forms.submissions"

// wantTraceparent is the trace context send hands over; tracing is off in
// the plugin, so it goes on as it came.
const wantTraceparent = "00-01020300000000000000000000000000-0405060000000000-01"

func cluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// configured is a transport pointed at c, with loopback allowed.
func configured(t *testing.T, c *kfake.Cluster, extra ...transport.Settings) *Transport {
	t.Helper()
	// Short client waits, so the retry paths run within a test's time.
	tr := New(Options{ClientOpts: []kgo.Opt{kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.MetadataMinAge(50 * time.Millisecond), kgo.UnknownTopicRetries(1)}})
	s := transport.Settings{SettingBrokers: strings.Join(c.ListenAddrs(), ","), SettingAllowedNetworks: "127.0.0.1",
		SettingProduceTimeout: "3s", SettingDialTimeout: "1s"}
	for _, e := range extra {
		for k, v := range e {
			s[k] = v
		}
	}
	if err := tr.Configure(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

func signed(t *testing.T, secret, body string) transport.Message {
	t.Helper()
	h, err := webhook.SignHeaders("dlv_1", time.Now(), []byte(body), secret)
	if err != nil {
		t.Fatal(err)
	}
	msg := transport.Message{DeliveryID: "dlv_1", Attempt: 1,
		Endpoint: transport.Endpoint{Config: map[string]string{ConfigTopic: topic}}, Body: []byte(body)}
	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		msg.Headers = append(msg.Headers, transport.Header{Name: name, Value: h.Get(name)})
	}
	return msg
}

func send(tr *Transport, msg transport.Message, within time.Duration) transport.Outcome {
	// The attempt's trace context, as the host hands it over.
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), sc), within)
	defer cancel()
	msg.Deadline, _ = ctx.Deadline()
	return tr.Send(ctx, msg)
}

// consume reads every record of topic from the start.
func consume(t *testing.T, c *kfake.Cluster, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d records of %d: %v", len(out), want, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func TestProduceDelivered(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	tr := configured(t, c)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	body := `{"type":"submission.received","submission":{"id":"sub_42","form_id":"contact","data":{"a":"<b>"}}}`
	msg := signed(t, secret, body)
	if out := send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("Send = %+v, want delivered", out)
	}
	recs := consume(t, c, 1)
	r := recs[0]
	if string(r.Value) != body {
		t.Errorf("value %s, want %s", r.Value, body)
	}
	if string(r.Key) != "sub_42" {
		t.Errorf("key %q, want the submission id sub_42", r.Key)
	}
	// The producer id is assigned to idempotent producers only; -1 otherwise.
	if r.ProducerID < 0 {
		t.Errorf("producer id %d: the record was not produced idempotently", r.ProducerID)
	}
	h := http.Header{}
	var names []string
	for _, rh := range r.Headers {
		names = append(names, rh.Key)
		h.Add(rh.Key, string(rh.Value))
	}
	if want := "webhook-id,webhook-timestamp,webhook-signature,traceparent"; strings.Join(names, ",") != want {
		t.Errorf("headers %v, want %s", names, want)
	}
	if tp := h.Get("traceparent"); tp != wantTraceparent {
		t.Errorf("traceparent %q, want the attempt's %q", tp, wantTraceparent)
	}
	if err := webhook.Verify(h, r.Value, secret); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
}

// TestCompression produces with each codec and reads the record back: the
// batch carries the codec asked for, and the default is none, which every
// consumer reads (franz-go's own default, snappy, is not).
func TestCompression(t *testing.T) {
	t.Parallel()
	// A batch goes out compressed only when that makes it smaller, so the
	// body is one every codec shrinks.
	body := `{"type":"submission.received","submission":{"id":"sub_7","form_id":"contact","data":{"note":"` +
		strings.Repeat("hello, compressible world. ", 80) + `"}}}`
	tests := []struct {
		setting string // "" leaves the setting out
		want    uint8  // the record batch's compression attribute
	}{
		{"", 0},
		{"none", 0},
		{"gzip", 1},
		{"snappy", 2},
		{"lz4", 3},
		{"zstd", 4},
	}
	for _, tt := range tests {
		name := tt.setting
		if name == "" {
			name = "the default"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := cluster(t)
			var extra transport.Settings
			if tt.setting != "" {
				extra = transport.Settings{SettingCompression: tt.setting}
			}
			tr := configured(t, c, extra)
			secret, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			if out := send(tr, signed(t, secret, body), 5*time.Second); out.Kind != transport.OutcomeDelivered {
				t.Fatalf("Send = %+v, want delivered", out)
			}
			r := consume(t, c, 1)[0]
			if got := r.Attrs.CompressionType(); got != tt.want {
				t.Errorf("record batch compression %d, want %d (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)", got, tt.want)
			}
			if string(r.Value) != body {
				t.Errorf("value read back differs from the body sent: %d bytes, want %d", len(r.Value), len(body))
			}
		})
	}
}

func TestRecordKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ body, want string }{
		{`{"type":"submission.received","submission":{"id":"sub_1"}}`, "sub_1"},
		{`{"type":"order.paid","event":{"id":"evt_1"}}`, "evt_1"},
		{`{"type":"x"}`, "dlv_w"},
		{`not json`, "dlv_w"},
	}
	for _, tt := range tests {
		if got := recordKey([]byte(tt.body), "dlv_w"); got != tt.want {
			t.Errorf("recordKey(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

// failProduce makes the cluster answer the next n produce requests with
// code for every partition.
func failProduce(c *kfake.Cluster, code int16, n int) *atomic.Int32 {
	var seen atomic.Int32
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if int(seen.Add(1)) > n {
			return nil, nil, false
		}
		c.KeepControl()
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &seen
}

func TestBrokerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  *kerr.Error
		want transport.OutcomeKind
	}{
		{kerr.MessageTooLarge, transport.OutcomePermanent},
		{kerr.RecordListTooLarge, transport.OutcomePermanent},
		{kerr.TopicAuthorizationFailed, transport.OutcomePermanent},
		{kerr.InvalidTopicException, transport.OutcomePermanent},
		{kerr.NotEnoughReplicas, transport.OutcomeRetryable},
		{kerr.RequestTimedOut, transport.OutcomeRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.err.Message, func(t *testing.T) {
			t.Parallel()
			c := cluster(t)
			tr := configured(t, c, transport.Settings{SettingProduceTimeout: "1500ms"})
			// Every produce fails: a retryable code is retried by the
			// client until the attempt's deadline.
			failProduce(c, tt.err.Code, 1<<30)
			out := send(tr, signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{"secret":"BODY-MUST-NOT-LEAK"}`), 5*time.Second)
			if out.Kind != tt.want || !strings.Contains(out.Error, topic) {
				t.Fatalf("Send = %+v, want %s naming the topic", out, tt.want)
			}
			if strings.Contains(out.Error, "BODY-MUST-NOT-LEAK") {
				t.Errorf("outcome leaks the body: %s", out.Error)
			}
		})
	}
}

func TestRetryableErrorsPassWithinTheAttempt(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	tr := configured(t, c)
	seen := failProduce(c, kerr.NotLeaderForPartition.Code, 2)
	out := send(tr, signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`), 5*time.Second)
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("Send = %+v, want delivered after the leader moved twice", out)
	}
	if n := seen.Load(); n < 3 {
		t.Errorf("%d produce requests, want the two failed ones and a third", n)
	}
	// Idempotence: the retried batch is stored once.
	if recs := consume(t, c, 1); len(recs) != 1 {
		t.Errorf("%d records, want 1", len(recs))
	}
}

func TestUnknownTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	tr := configured(t, c)
	msg := signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`)
	msg.Endpoint.Config[ConfigTopic] = "no.such.topic"
	out := send(tr, msg, 5*time.Second)
	if out.Kind != transport.OutcomePermanent || !strings.Contains(out.Error, "create it") {
		t.Fatalf("Send = %+v, want permanent telling to create the topic", out)
	}
}

func TestBrokerAwayAndBack(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// A data directory, as a real broker has: the topic (and its id)
	// outlives the restart.
	dir := t.TempDir()
	c := cluster(t, kfake.Ports(port), kfake.DataDir(dir))
	tr := configured(t, c, transport.Settings{SettingProduceTimeout: "1s"})
	msg := signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`)
	if out := send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("first Send = %+v", out)
	}
	c.Close()
	if out := send(tr, msg, 5*time.Second); out.Kind != transport.OutcomeRetryable {
		t.Fatalf("Send with the broker away = %+v, want retryable", out)
	}
	// Back on the same port; the same client reconnects by itself.
	c2 := cluster(t, kfake.Ports(port), kfake.DataDir(dir))
	var out transport.Outcome
	for range 10 {
		if out = send(tr, msg, 5*time.Second); out.Kind == transport.OutcomeDelivered {
			break
		}
		time.Sleep(200 * time.Millisecond) // the worker's retry wait
	}
	if out.Kind != transport.OutcomeDelivered {
		t.Fatalf("Send with the broker back = %+v, want delivered", out)
	}
	consume(t, c2, 2)
	if n := tr.clients.Len(); n != 1 {
		t.Errorf("%d clients, want the one reused", n)
	}
}

func TestLoopbackRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	var dialled atomic.Int32
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		dialled.Add(1)
		return nil, nil, false
	})
	tr := configured(t, c, transport.Settings{SettingAllowedNetworks: ""})
	msg := signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`)
	if err := tr.Validate(context.Background(), msg.Endpoint); err == nil || !strings.Contains(err.Error(), "allowed_networks") {
		t.Errorf("Validate = %v, want a refusal naming allowed_networks", err)
	}
	out := send(tr, msg, 5*time.Second)
	if (out.Kind != transport.OutcomePermanent || !out.NoRequest) || !strings.Contains(out.Error, "127.0.0.1") {
		t.Errorf("Send = %+v, want refused naming the address", out)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the cluster saw %d requests, want none", n)
	}
}

// A seed broker on an allowed address that advertises a refused one: the
// produce never reaches it, and says why.
func TestAdvertisedAddressIsChecked(t *testing.T) {
	t.Parallel()
	// The broker listens on every loopback address and advertises
	// 127.0.0.1 (not allowed); the plugin reaches it as 127.0.0.2
	// (allowed).
	c := cluster(t, kfake.ListenFn(func(network, address string) (net.Listener, error) {
		_, port, _ := net.SplitHostPort(address)
		ln, err := net.Listen(network, "0.0.0.0:"+port)
		return advertised{ln}, err
	}))
	_, port, _ := net.SplitHostPort(c.ListenAddrs()[0])
	tr := configured(t, c, transport.Settings{SettingBrokers: "127.0.0.2:" + port, SettingAllowedNetworks: "127.0.0.2", SettingProduceTimeout: "1s"})
	out := send(tr, signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`), 5*time.Second)
	if (out.Kind != transport.OutcomePermanent || !out.NoRequest) || !strings.Contains(out.Error, "127.0.0.1") {
		t.Fatalf("Send = %+v, want refused naming the advertised 127.0.0.1", out)
	}
}

// advertised is a listener on every address that names itself 127.0.0.1,
// which kfake then advertises.
type advertised struct{ net.Listener }

func (a advertised) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: a.Listener.Addr().(*net.TCPAddr).Port}
}

// A produce_timeout under a second is valid: franz-go's own record timeout,
// which refuses less than a second, is kept at a second or more.
func TestShortProduceTimeout(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	tr := configured(t, c, transport.Settings{SettingProduceTimeout: "400ms"})
	if out := send(tr, signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`), 5*time.Second); out.Kind != transport.OutcomeDelivered {
		t.Fatalf("Send = %+v, want delivered", out)
	}
}

func TestSASL(t *testing.T) {
	t.Parallel()
	const password = "PASSWORD-MUST-NOT-LEAK"
	c := cluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "hymical", password))
	tests := []struct {
		name, password string
		want           transport.OutcomeKind
	}{
		{"the right password", password, transport.OutcomeDelivered},
		// kfake closes the connection on a failed SCRAM exchange rather
		// than answering SASL_AUTHENTICATION_FAILED as Kafka does, so
		// here the produce can only time out; TestClassify holds the
		// permanent verdict for Kafka's answer.
		{"a wrong password", password + "-WRONG", transport.OutcomeRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := configured(t, c, transport.Settings{SettingSASLMechanism: "SCRAM-SHA-256", SettingSASLUsername: "hymical", SettingSASLPassword: tt.password})
			out := send(tr, signed(t, "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=", `{}`), 5*time.Second)
			if out.Kind != tt.want {
				t.Fatalf("Send = %+v, want %s", out, tt.want)
			}
			if strings.Contains(out.Error, password) {
				t.Errorf("outcome leaks the password: %s", out.Error)
			}
		})
	}
}
