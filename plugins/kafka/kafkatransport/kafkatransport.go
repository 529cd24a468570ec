// Package kafkatransport is the logic of the Kafka transport plugin: it
// produces a signed message to an endpoint's topic with acks=all and the
// idempotent producer, and classifies what came back. It speaks only the
// sdk/transport types and must not import anything from the server's
// server/ or storage/ trees.
//
// What it promises the server:
//   - the record's value is exactly the body it was handed; its headers
//     are exactly the headers it was handed (webhook-id,
//     webhook-timestamp, webhook-signature, in order, names as given)
//     followed by the attempt's traceparent (and tracestate);
//   - the record's key is the body's submission.id (an event from POST
//     /v1/events: its event.id), falling back to the webhook-id: one
//     submission's deliveries to a topic land on one partition, in order;
//   - delivered means every in-sync replica has the record (acks=all), and
//     the producer is idempotent, so the client's own retries within one
//     attempt do not write it twice;
//   - a topic that does not exist (after the client looked it up again a
//     few times), refused authorization or credentials, a message over the
//     topic's size limit and an invalid topic are permanent; brokers away,
//     no acknowledgement by the deadline, a moving leader and too few
//     in-sync replicas are retryable (see permanentCodes);
//   - error text names the brokers and the topic and what went wrong,
//     never the body, a header or the SASL password;
//   - connections to brokers whose addresses are not globally reachable
//     (the rule of sdk/netguard) are refused, at Validate for the seed
//     brokers and on every dial after DNS resolution, including the
//     addresses the brokers' metadata advertises, unless the plugin's
//     allowed_networks setting contains the address. A refusal is final and
//     no request goes out.
//
// One client is kept per broker list (in practice one per plugin process,
// the plugin's brokers setting) and reused across sends; franz-go keeps its
// connections and reconnects by itself.
//
// At least once, not exactly once: idempotence covers the client's
// retries inside one attempt, not a new attempt after a lost
// acknowledgement, which produces the record again. Consumers dedupe on the
// webhook-id header or the submission id, as every Hymical receiver must.
package kafkatransport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"

	"github.com/hymical/hymical/plugins/internal/pluginkit"
	"github.com/hymical/hymical/sdk/netguard"
	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
)

// ClientName is the client.id the plugin's connections give the brokers,
// so an operator can find them in broker logs and quotas.
const ClientName = "hymical-plugin-kafka"

// errClosed is what a send after Close gets.
var errClosed = errors.New("the kafka transport is shutting down")

// Options are what the embedding program decides, as opposed to the
// operator's settings.
type Options struct {
	// Logger receives client events (a client made for a broker list);
	// nil discards them. Messages, headers and credentials are never
	// logged.
	Logger *slog.Logger
	// ClientOpts are added to every client's options, after the plugin's
	// own; tests use them to shorten the client's retry waits.
	ClientOpts []kgo.Opt
}

// Transport is the Kafka transport. It is safe for concurrent use.
type Transport struct {
	log     *slog.Logger
	opts    []kgo.Opt
	clients *pluginkit.Conns[settings, *client]
}

var _ transport.Transport = (*Transport)(nil)

// New returns a transport with the default settings. Until Configure gives
// it a brokers setting, only endpoints naming their own brokers can be sent
// to.
func New(opts Options) *Transport {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Transport{log: log, opts: opts.ClientOpts, clients: pluginkit.NewConns[settings, *client](defaultSettings(), errClosed)}
}

// Configure applies the plugin-wide settings; settings not given take their
// defaults. Clients made under earlier settings are closed, and new ones
// are made on the next send.
func (t *Transport) Configure(_ context.Context, s transport.Settings) error {
	next, err := parseSettings(s)
	if err != nil {
		return scrubSecret(err, s[SettingSASLPassword])
	}
	closeAll(t.clients.Configure(next))
	return nil
}

func scrubSecret(err error, secret string) error {
	if text := redact.Hide(err.Error(), secret); text != err.Error() {
		return errors.New(text)
	}
	return err
}

// Close closes every client. Sends after Close make no request.
func (t *Transport) Close() {
	closeAll(t.clients.Close())
}

func closeAll(clients []*client) {
	for _, c := range clients {
		go c.cl.Close()
	}
}

// Validate checks an endpoint's config without connecting: an endpoint is
// refused for what no retry could fix (no topic or one Kafka would refuse,
// no brokers or unreadable ones, a broker the SSRF guard refuses), not
// because the brokers are down right now or the topic is not created yet.
func (t *Transport) Validate(ctx context.Context, e transport.Endpoint) error {
	st := t.clients.Settings()
	tgt, err := st.resolve(e)
	if err != nil {
		return err
	}
	return checkBrokers(ctx, st, tgt.brokers)
}

// client is one franz-go client for one broker list.
type client struct {
	cl *kgo.Client

	mu sync.Mutex
	// connErr is the last failure to connect to a broker (a dial the
	// guard refused, refused credentials, a certificate that does not
	// verify), and when. franz-go keeps such records buffered and retries,
	// so a produce only times out; this says why.
	connErr   error
	connErrAt time.Time
	// definite is the last such failure that says what is wrong (a
	// broker's error code, the guard's refusal, a certificate), kept
	// apart: a broker that refused credentials may just close the
	// connections that follow, and that EOF says nothing.
	definite   error
	definiteAt time.Time
}

var _ kgo.HookBrokerConnect = (*client)(nil)

// OnBrokerConnect records why a connection failed.
func (c *client) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	var kafkaErr *kerr.Error
	var refused *netguard.RefusedError
	var certErr *tls.CertificateVerificationError
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connErr, c.connErrAt = err, now
	if errors.As(err, &kafkaErr) || errors.As(err, &refused) || errors.As(err, &certErr) {
		c.definite, c.definiteAt = err, now
	}
}

func (c *client) lastConnErr(since time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.definiteAt.Before(since) {
		return c.definite
	}
	if !c.connErrAt.Before(since) {
		return c.connErr
	}
	return nil
}

// client returns the client for tgt's brokers, making it on first use.
func (t *Transport) client(ctx context.Context, tgt target, st settings) (*client, error) {
	c, ok, err := t.clients.Lookup(tgt.key())
	if err != nil {
		return nil, err
	}
	if ok {
		return c, nil
	}
	// The seed brokers are checked by name once, so a refused broker
	// fails clearly rather than as a timeout; the dialer still checks
	// every address it connects to, the advertised ones included.
	if err := checkBrokers(ctx, st, tgt.brokers); err != nil {
		return nil, err
	}
	codec, _ := compressionCodec(st.compression) // checked by Configure
	c = &client{}
	opts := []kgo.Opt{
		kgo.SeedBrokers(tgt.brokers...),
		kgo.ClientID(ClientName),
		// acks=all, which the idempotent producer (franz-go's default)
		// requires anyway; said here so no option can weaken it.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.Dialer(dialer(st)),
		kgo.WithHooks(c),
		kgo.DialTimeout(st.dialTimeout),
		// A record the brokers never take is failed rather than kept
		// buffered forever after its attempt gave up; franz-go takes
		// nothing under a second here.
		kgo.RecordDeliveryTimeout(max(st.produceTimeout, time.Second)),
		kgo.ProducerLinger(0),
		// Always said, since franz-go's default (snappy) is one that some
		// consumers cannot read.
		kgo.ProducerBatchCompression(codec),
	}
	if st.sasl != nil {
		opts = append(opts, kgo.SASL(st.sasl))
	}
	opts = append(opts, t.opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("making a Kafka client for %s: %w", tgt.key(), err)
	}
	c.cl = cl
	got, err := t.clients.Get(tgt.key(), nil, func() *client { return c })
	if err != nil || got != c {
		// Closed meanwhile, or another send made one first.
		go cl.Close()
		return got, err
	}
	t.log.Info("kafka client made", "brokers", tgt.key(), "sasl", st.sasl != nil, "tls", st.tls != nil, "compression", st.compression)
	return c, nil
}

// dialer connects through the SSRF guard, then TLS if set.
func dialer(st settings) func(ctx context.Context, network, host string) (net.Conn, error) {
	d := st.guard.Dialer(&net.Dialer{Timeout: st.dialTimeout})
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		if st.tls == nil {
			return conn, nil
		}
		cfg := st.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(host)
		}
		tc := tlsClient(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// Send produces msg and waits for the brokers' acknowledgement.
func (t *Transport) Send(ctx context.Context, msg transport.Message) (out transport.Outcome) {
	st := t.clients.Settings()
	// Refusals before the produce: nothing has left the process.
	tgt, err := st.resolve(msg.Endpoint)
	if err != nil {
		return transport.Refused(err.Error())
	}
	rec, err := record(msg, tgt.topic)
	if err != nil {
		return transport.Refused(err.Error())
	}
	// The consumer's spans join the attempt's trace through these headers.
	ctx, span, traceHeaders := transport.StartPublish(ctx, "kafka", tgt.topic)
	span.SetAttributes(attribute.String("messaging.kafka.message.key", string(rec.Key)))
	defer pluginkit.EndPublish(span, &out)
	for _, name := range slices.Sorted(maps.Keys(traceHeaders)) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: name, Value: []byte(traceHeaders[name])})
	}

	// The wait ends at the attempt's deadline, not at the host's (which
	// is later by a grace), so the answer is back in time.
	ctx, cancel := pluginkit.AttemptContext(ctx, msg.Deadline, st.produceTimeout)
	defer cancel()

	start := time.Now()
	c, err := t.client(ctx, tgt, st)
	if err == nil {
		err = produce(ctx, c.cl, rec)
	}
	if err == nil {
		span.SetAttributes(attribute.Int("messaging.destination.partition.id", int(rec.Partition)),
			attribute.Int64("messaging.kafka.offset", rec.Offset))
		return transport.Delivered(0)
	}
	f := failure{topic: tgt.topic, brokers: tgt.key(), waited: time.Since(start)}
	if c != nil {
		f.connErr = c.lastConnErr(start)
	}
	o := classify(err, f)
	o.Error = scrub(o.Error, st.password, msg)
	return o
}

// produce hands rec to the client and waits for its promise or ctx. A
// record the brokers are still working on when ctx ends is left to the
// client (bounded by the delivery timeout): failing it early is what
// franz-go refuses to do to an idempotent producer's in-flight batch.
func produce(ctx context.Context, cl *kgo.Client, rec *kgo.Record) error {
	done := make(chan error, 1)
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// record lays out the Kafka record from the signed message.
func record(msg transport.Message, topic string) (*kgo.Record, error) {
	rec := &kgo.Record{Topic: topic, Value: msg.Body}
	var id, ts, sig string
	for _, h := range msg.Headers {
		if h.Name == "" {
			return nil, errors.New("the message has a header with an empty name, which a Kafka record header cannot tell apart")
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)})
		switch strings.ToLower(h.Name) {
		case "webhook-id":
			id = cmp(id, h.Value)
		case "webhook-timestamp":
			ts = cmp(ts, h.Value)
		case "webhook-signature":
			sig = cmp(sig, h.Value)
		}
	}
	if id == "" || ts == "" || sig == "" {
		return nil, errors.New("the message lacks a webhook-id, webhook-timestamp or webhook-signature header, without which a consumer cannot verify it")
	}
	rec.Key = []byte(recordKey(msg.Body, id))
	return rec, nil
}

// cmp keeps the first non-empty value, the one an HTTP receiver reads.
func cmp(have, v string) string {
	if have != "" {
		return have
	}
	return v
}

// recordKey is the id one submission's deliveries share: the body's
// submission.id, or event.id for an event, or else the webhook-id.
func recordKey(body []byte, webhookID string) string {
	var b struct {
		Submission struct {
			ID string `json:"id"`
		} `json:"submission"`
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
	}
	if json.Unmarshal(body, &b) == nil {
		switch {
		case b.Submission.ID != "":
			return b.Submission.ID
		case b.Event.ID != "":
			return b.Event.ID
		}
	}
	return webhookID
}

// scrub makes an outcome's text safe: no SASL password, and none of the
// header values or the body, should an error ever have quoted them.
func scrub(text, password string, msg transport.Message) string {
	return transport.ScrubError(redact.Hide(text, password), msg)
}
