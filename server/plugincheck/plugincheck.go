// Package plugincheck holds a transport plugin to what the server needs of
// it, for the plugin's author (`hymical plugins check PATH`): it runs the
// plugin through the real plugin host (server/pluginhost), sends to
// targets it sets up itself on this machine, and reports each rule as a
// row that passed or failed.
//
// It owns those targets and the report, nothing else: starting, talking
// to and stopping the plugin is pluginhost's, so a plugin that passes here
// is driven exactly as serve drives it. It touches no database and no
// server configuration, and every target is on loopback or in a temporary
// directory.
package plugincheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/pluginhost"
)

// Target is the kind of place the checked plugin sends to, which decides
// the endpoints the check uses and how it sees what arrived.
type Target string

const (
	// TargetHTTP is a plugin that sends to the endpoint's URL over HTTP,
	// as the shipped http plugin does: the check runs receivers on
	// loopback and, as the setting allowed_networks, allows the plugin's
	// SSRF guard 127.0.0.1/32 only, so a receiver on 127.0.0.2 is a
	// target the guard must refuse.
	TargetHTTP Target = "http"
	// TargetJSONL is a plugin that appends each message as a JSON line to
	// the file its endpoint config's "path" names, as the example plugins
	// do (examples/custom-transport, examples/node-transport): the check
	// gives it a directory as the setting root, and a file outside it is
	// the target it must refuse.
	TargetJSONL Target = "jsonl"
)

// Targets are the kinds the check knows, for a usage message.
var Targets = []Target{TargetHTTP, TargetJSONL}

// DefaultDeadline is the deadline of the send to a receiver that hangs.
const DefaultDeadline = 2 * time.Second

// deadlineSlack is how long after its deadline a plugin's answer still
// counts as by the deadline: the host's own work and a loaded machine,
// not a grace a plugin may use.
const deadlineSlack = time.Second

// sendTimeout is the deadline of the sends that must not hang: far more
// than a send on loopback or to a local file takes.
const sendTimeout = 5 * time.Second

// Options says which plugin to check and how.
type Options struct {
	// Path is the plugin's executable.
	Path string
	// Name is the transport name the host gives it; empty means the part
	// of the file name after hymical-plugin-, or "checked".
	Name string
	// Target is what the plugin sends to; empty means TargetHTTP.
	Target Target
	// Settings are added to the target's own settings, and win over them.
	Settings map[string]string
	// Config is added to every endpoint config the check uses.
	Config map[string]string
	// Deadline bounds the send to the receiver that hangs; zero means
	// DefaultDeadline.
	Deadline time.Duration
	// Logger receives the plugin host's log, the plugin's own included;
	// nil means none.
	Logger *slog.Logger
}

// Row is one rule and whether the plugin kept it.
type Row struct {
	Name   string
	Pass   bool
	Detail string
}

// Report is the rows, in the order they ran.
type Report struct {
	Plugin string
	Rows   []Row
}

// Failed names the rows that did not pass.
func (r Report) Failed() []string {
	var out []string
	for _, row := range r.Rows {
		if !row.Pass {
			out = append(out, row.Name)
		}
	}
	return out
}

// Write prints the report as a table.
func (r Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, row := range r.Rows {
		result := "FAIL"
		if row.Pass {
			result = "pass"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Name, result, row.Detail)
	}
	return tw.Flush()
}

// The rows, in the order they run.
const (
	RowHandshake    = "handshake"
	RowValidateGood = "validate-good"
	RowValidateBad  = "validate-bad"
	RowSend         = "send"
	RowNoRequest    = "no-request"
	RowDeadline     = "deadline"
	RowShutdown     = "shutdown"
)

// unknownKey is the endpoint config key the bad endpoint adds: a plugin
// must refuse a key it does not know, or an operator's typo passes
// silently and the endpoint does not do what they wrote.
const unknownKey = "hymical_check_unknown_key"

// Run checks the plugin. Its error is the check's own failure to set up
// (a temporary directory, a listener); what the plugin did wrong is in the
// report.
func Run(ctx context.Context, opts Options) (Report, error) {
	name := opts.Name
	if name == "" {
		name = strings.TrimPrefix(filepath.Base(opts.Path), pluginhost.BinaryPrefix)
		if name == filepath.Base(opts.Path) || name == "" {
			name = "checked"
		}
	}
	deadline := opts.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var tg target
	var err error
	switch opts.Target {
	case TargetHTTP, "":
		tg, err = newHTTPTarget()
	case TargetJSONL:
		tg, err = newJSONLTarget()
	default:
		return Report{}, fmt.Errorf("target %q is not one the check knows; use one of %v", opts.Target, Targets)
	}
	if err != nil {
		return Report{}, fmt.Errorf("setting up the %s target: %w", opts.Target, err)
	}
	defer tg.close()

	settings := tg.settings()
	for k, v := range opts.Settings {
		settings[k] = v
	}
	withConfig := func(e transport.Endpoint) transport.Endpoint {
		cfg := map[string]string{}
		for k, v := range opts.Config {
			cfg[k] = v
		}
		for k, v := range e.Config {
			cfg[k] = v
		}
		e.Config = cfg
		return e
	}

	c := &checker{name: name, report: Report{Plugin: name}}
	host, err := pluginhost.New(ctx, pluginhost.Config{
		Plugins: []pluginhost.PluginConfig{{Name: name, Path: opts.Path, Settings: settings}},
	}, logger)
	if err != nil {
		c.add(RowHandshake, false, "the host could not start and configure the plugin: %v", err)
		for _, row := range []string{RowValidateGood, RowValidateBad, RowSend, RowNoRequest, RowDeadline, RowShutdown} {
			c.add(row, false, "not run: the plugin did not start")
		}
		return c.report, nil
	}
	defer host.Close()
	protocol := 0
	for _, p := range host.Plugins() {
		protocol = p.Protocol
	}
	c.add(RowHandshake, true, "started, mutual TLS, protocol %d, Configure accepted the settings", protocol)

	good := withConfig(tg.good())
	if err := host.Validate(ctx, name, good); err != nil {
		c.add(RowValidateGood, false, "refused an endpoint it should accept (%s): %v", describe(good), err)
	} else {
		c.add(RowValidateGood, true, "accepted %s", describe(good))
	}

	bad := withConfig(tg.good())
	bad.Config[unknownKey] = "1"
	switch err := host.Validate(ctx, name, bad); {
	case errors.Is(err, transport.ErrRejected):
		c.add(RowValidateBad, true, "refused an unknown config key: %s", brief(err.Error()))
	case err != nil:
		c.add(RowValidateBad, false, "Validate failed instead of answering a refusal: %v", err)
	default:
		c.add(RowValidateBad, false, "accepted the config key %q, which it cannot know: refuse keys you do not take, saying which you do", unknownKey)
	}

	c.send(ctx, host, tg, withConfig(tg.good()))
	c.noRequest(ctx, host, tg, withConfig(tg.refused()))
	c.deadline(ctx, host, tg, withConfig(tg.hanging()), deadline)
	tg.releaseHang()
	c.shutdown(ctx, host)
	return c.report, nil
}

type checker struct {
	name   string
	report Report
}

func (c *checker) add(row string, pass bool, format string, args ...any) {
	c.report.Rows = append(c.report.Rows, Row{Name: row, Pass: pass, Detail: fmt.Sprintf(format, args...)})
}

// send delivers one signed message to the good target and compares what
// arrived with what was sent.
func (c *checker) send(ctx context.Context, host *pluginhost.Host, tg target, ep transport.Endpoint) {
	msg, err := message(ep)
	if err != nil {
		c.add(RowSend, false, "could not sign the message: %v", err)
		return
	}
	out := host.Send(ctx, c.name, msg, time.Now().Add(sendTimeout))
	if out.Kind != transport.OutcomeDelivered {
		c.add(RowSend, false, "outcome %s, want delivered: %s", out.Kind, brief(out.Error))
		return
	}
	got, err := tg.arrived()
	if err != nil {
		c.add(RowSend, false, "delivered, but reading what arrived failed: %v", err)
		return
	}
	if len(got) != 1 {
		c.add(RowSend, false, "delivered, but %d messages arrived at the target, want 1", len(got))
		return
	}
	if why := sameMessage(msg, got[0]); why != "" {
		c.add(RowSend, false, "delivered, but %s", why)
		return
	}
	c.add(RowSend, true, "delivered; body (%d bytes) and webhook-id, webhook-timestamp, webhook-signature arrived as sent", len(msg.Body))
}

// noRequest sends to a target the plugin must refuse before sending: the
// outcome must say no request was made, and none may arrive.
func (c *checker) noRequest(ctx context.Context, host *pluginhost.Host, tg target, ep transport.Endpoint) {
	msg, err := message(ep)
	if err != nil {
		c.add(RowNoRequest, false, "could not sign the message: %v", err)
		return
	}
	out := host.Send(ctx, c.name, msg, time.Now().Add(sendTimeout))
	leaked := tg.refusedArrivals()
	switch {
	case leaked > 0:
		c.add(RowNoRequest, false, "the refused target %s received %d request(s): the plugin sent where it must not", tg.refusedName(), leaked)
	case out.Kind == transport.OutcomeDelivered:
		c.add(RowNoRequest, false, "outcome delivered for the refused target %s", tg.refusedName())
	case !out.NoRequest:
		c.add(RowNoRequest, false, "outcome %s without no_request for the refused target %s: a refusal before sending must say no request was made, or the server counts an attempt (%s)", out.Kind, tg.refusedName(), brief(out.Error))
	default:
		c.add(RowNoRequest, true, "%s, no_request, for %s: %s", out.Kind, tg.refusedName(), brief(out.Error))
	}
}

// deadline sends to a target that never answers: the plugin must answer
// by the deadline itself, not be found hung by the host after its grace.
func (c *checker) deadline(ctx context.Context, host *pluginhost.Host, tg target, ep transport.Endpoint, d time.Duration) {
	msg, err := message(ep)
	if err != nil {
		c.add(RowDeadline, false, "could not sign the message: %v", err)
		return
	}
	before := host.Restarts(c.name)
	start := time.Now()
	out := host.Send(ctx, c.name, msg, start.Add(d))
	took := time.Since(start)
	restarted := host.Restarts(c.name) > before
	switch {
	case restarted:
		c.add(RowDeadline, false, "no answer by the %s deadline: the host counted the plugin hung after %s and restarted it; stop the send when its deadline passes (the context in Go, the abort signal in Node)", d, took.Round(10*time.Millisecond))
	case took > d+deadlineSlack:
		c.add(RowDeadline, false, "answered %s after the %s deadline", (took - d).Round(10*time.Millisecond), d)
	case out.Kind != transport.OutcomeRetryable:
		c.add(RowDeadline, false, "outcome %s after %s, want retryable: the receiver never answered", out.Kind, took.Round(10*time.Millisecond))
	case out.NoRequest && tg.hangArrivals() > 0:
		c.add(RowDeadline, false, "said no request was made, but the receiver got one")
	default:
		c.add(RowDeadline, true, "retryable after %s (deadline %s): %s", took.Round(10*time.Millisecond), d, brief(out.Error))
	}
}

// shutdown stops the plugin as the host does and checks that it exited by
// itself, with status 0, within go-plugin's grace.
func (c *checker) shutdown(ctx context.Context, host *pluginhost.Host) {
	// A plugin the deadline row found hung was killed; start it again, so
	// that its stop is checked too.
	if err := host.Up(ctx); err != nil {
		c.add(RowShutdown, false, "not run: the plugin is not running: %v", err)
		return
	}
	st, err := host.Stop(c.name)
	switch {
	case err != nil:
		c.add(RowShutdown, false, "%v", err)
	case !st.Graceful:
		c.add(RowShutdown, false, "did not exit when the host asked (GRPCController.Shutdown); killed after %s", st.Took.Round(10*time.Millisecond))
	case st.Exit != nil:
		c.add(RowShutdown, false, "exited when asked, but with %v, want status 0", st.Exit)
	default:
		c.add(RowShutdown, true, "exited with status 0, %s after the host asked", st.Took.Round(time.Millisecond))
	}
}

// message is a signed submission for ep, as the server would hand it to a
// plugin: a body with characters a re-encoding would change, and the
// Standard Webhooks headers signed with a secret made for this check.
func message(ep transport.Endpoint) (transport.Message, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	sub := hex.EncodeToString(id)
	body := []byte(`{"type":"submission.received","submission":{"id":"sub_` + sub + `","form_id":"form_check",` +
		`"data":{"note":"<&> \u00fc 1.10"},"created_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}}`)
	secret, err := webhook.NewSecret()
	if err != nil {
		return transport.Message{}, err
	}
	deliveryID := "dlv_check_" + sub
	sig, err := webhook.Sign(deliveryID, time.Now(), body, secret)
	if err != nil {
		return transport.Message{}, err
	}
	return transport.Message{
		DeliveryID: deliveryID,
		Attempt:    1,
		Endpoint:   ep,
		Headers: []transport.Header{
			{Name: "webhook-id", Value: deliveryID},
			{Name: "webhook-timestamp", Value: fmt.Sprint(time.Now().Unix())},
			{Name: "webhook-signature", Value: sig},
		},
		Body: body,
	}, nil
}

// arrival is one message as the target received it.
type arrival struct {
	headers map[string]string // by lowercase name
	body    []byte
}

// sameMessage says how got differs from what was sent; "" when it does
// not.
func sameMessage(sent transport.Message, got arrival) string {
	if string(got.body) != string(sent.Body) {
		return fmt.Sprintf("the body arrived changed (%d bytes sent, %d arrived)", len(sent.Body), len(got.body))
	}
	for _, h := range sent.Headers {
		v, ok := got.headers[strings.ToLower(h.Name)]
		switch {
		case !ok:
			return fmt.Sprintf("header %s did not arrive", h.Name)
		case v != h.Value:
			// The values are a signature and its inputs: say which
			// differs, never what it holds.
			return fmt.Sprintf("header %s arrived with another value", h.Name)
		}
	}
	return ""
}

// describe names an endpoint for the report: its URL, or its config keys.
func describe(e transport.Endpoint) string {
	if e.URL != "" {
		return e.URL
	}
	parts := make([]string, 0, len(e.Config))
	for k, v := range e.Config {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// brief cuts a plugin's error text to what fits a table row.
func brief(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 120 {
		return string(r[:119]) + "…"
	}
	return s
}
