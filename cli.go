package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/server/api/apiwire"
)

// The operator commands talk to a running server's HTTP API, so they see
// exactly what the API enforces (auth, validation, the audit of replays)
// and work against a server on another host as well as this one. What they
// send and read are the API's own types, apiwire.

// apiClient calls the HTTP API with the admin token.
type apiClient struct {
	base     string
	token    string
	operator string
	http     *http.Client
}

// The variables the CLI reads. FORMS_ is the product's one prefix, for the
// server's settings and the CLI's alike, so the admin token is the server's
// own variable and one shell can hold both.
const (
	envServer     = "FORMS_CLI_SERVER"
	envAdminToken = "FORMS_SERVER_ADMIN_TOKEN"
	// envServerOld is FORMS_CLI_SERVER's name before the prefix was made
	// one. It is still read, with a warning, for one release, so scripts
	// that set it keep working while they are changed; then it goes.
	envServerOld = "HYMICAL_SERVER"
)

const defaultServer = "http://127.0.0.1:8080"

// clientFlags adds the flags every API command takes; the client it
// returns after parsing warns on stderr of a deprecated variable it read.
func clientFlags(fs *flagSet, stderr io.Writer) func() (*apiClient, error) {
	server := fs.String("server", defaultServer, "base URL of the running server (env "+envServer+")")
	token := fs.String("token", "", "admin token (default: env "+envAdminToken+"; a flag is visible in the process list)")
	operator := fs.String("operator", envOr("USER", ""), "who you are, recorded in the replay audit")
	return func() (*apiClient, error) {
		base := *server
		if !flagGiven(fs, "server") {
			if v := lookupRenamed(os.Getenv, envServer, envServerOld, stderr); v != "" {
				base = v
			}
		}
		t := *token
		if t == "" {
			t = os.Getenv(envAdminToken)
		}
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("the server %q is not an http(s) URL such as %s: fix --server or %s", base, defaultServer, envServer)
		}
		return &apiClient{base: strings.TrimRight(base, "/"), token: t, operator: *operator, http: &http.Client{Timeout: 30 * time.Second}}, nil
	}
}

// flagGiven reports whether the command line set the flag name, even to
// its default value.
func flagGiven(fs *flagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// lookupRenamed reads the variable name, or, when it is unset or empty, the
// name it had before, old, warning on warn that old is deprecated. When
// both are set, name wins and the warning says old is ignored, so a stale
// value left in a profile does not go unnoticed.
func lookupRenamed(getenv func(string) string, name, old string, warn io.Writer) string {
	v, oldV := getenv(name), getenv(old)
	switch {
	case oldV == "":
	case v == "":
		fmt.Fprintf(warn, "hymical: warning: %s is deprecated and will stop working in the next release; set %s instead\n", old, name)
		return oldV
	default:
		fmt.Fprintf(warn, "hymical: warning: %s is ignored because %s is set; unset %s, which is deprecated\n", old, name, old)
	}
	return v
}

// serverEnviron is environ without the variables only the CLI reads.
// serve refuses a FORMS_ variable that names none of its settings, which
// catches a misspelt one; the CLI's share the prefix on purpose, so that
// one shell (or profile) can set both.
func serverEnviron(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == envServer
	})
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// do sends body (nil for none) and decodes the answer into out (nil to drop it).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(ctx, method, path, nil, body, out)
}

// doWith is do with extra request headers. An answer in the API's error
// shape comes back as an error wrapping *apiwire.Error, with its status.
func (c *apiClient) doWith(ctx context.Context, method, path string, extra http.Header, body, out any) error {
	_, err := c.exchange(ctx, method, path, extra, body, out)
	return err
}

// doKeyed is do with an Idempotency-Key when key is set; repeat reports
// that the server answered with what the key's first request did.
func (c *apiClient) doKeyed(ctx context.Context, method, path, key string, body, out any) (repeat bool, err error) {
	var extra http.Header
	if key != "" {
		extra = http.Header{"Idempotency-Key": {key}}
	}
	h, err := c.exchange(ctx, method, path, extra, body, out)
	return err == nil && h.Get("Idempotent-Replayed") == "true", err
}

// exchange is doWith, returning the answer's headers.
func (c *apiClient) exchange(ctx context.Context, method, path string, extra http.Header, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	// Every write says JSON, with a body or without: a server in insecure
	// dev mode refuses writes that do not, so no web page can send one.
	if body != nil || method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.operator != "" {
		req.Header.Set("Hymical-Operator", c.operator)
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("is the server running at %s? %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e apiwire.ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return nil, fmt.Errorf("server answered %s", resp.Status)
		}
		e.Error.Status = resp.StatusCode
		if resp.StatusCode == http.StatusUnauthorized && c.token == "" {
			e.Error.Message += " (set " + envAdminToken + " or pass --token)"
		}
		return nil, fmt.Errorf("server answered %w", &e.Error)
	}
	if out == nil {
		return resp.Header, nil
	}
	return resp.Header, json.Unmarshal(data, out)
}

// outputFlag adds -o: table (the default) or json, the API's answer as it
// came.
func outputFlag(fs *flagSet) func() (asJSON bool, err error) {
	o := fs.String("o", "table", "output: table, or json (the API's answer, indented)")
	return func() (bool, error) {
		switch *o {
		case "table", "":
			return false, nil
		case "json":
			return true, nil
		}
		return false, fmt.Errorf("-o %q: use table or json", *o)
	}
}

// printJSON writes v indented, as -o json shows it.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runDeliveries(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "deliveries", []subcommand{
		{"list", "the newest deliveries, filtered, a page at a time", runDeliveriesList},
		{"show", "one delivery with its attempt history", runDeliveriesShow},
	}, args, stdout, stderr)
}

const deliveriesListUsage = `usage: hymical deliveries list [flags]

Lists deliveries, newest first, a page at a time; the last line says how to
ask for the next page.`

func runDeliveriesList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("deliveries list", deliveriesListUsage)
	client := clientFlags(fs, stderr)
	state := fs.String("state", "", "pending, processing, delivered or failed")
	endpoint := fs.String("endpoint", "", "endpoint id")
	form := fs.String("form", "", "form id")
	limit := fs.Int("limit", 50, "page size")
	cursor := fs.String("cursor", "", "the next_cursor a previous page printed")
	output := outputFlag(fs)
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("deliveries list takes no arguments, got %q; filter with the flags", fs.Args())
	}
	asJSON, err := output()
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"state": *state, "endpoint_id": *endpoint, "form_id": *form, "cursor": *cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("limit", fmt.Sprint(*limit))
	var page apiwire.DeliveryPage
	if err := c.do(ctx, http.MethodGet, "/v1/deliveries?"+q.Encode(), nil, &page); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, page)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tCYCLE\tENDPOINT\tCREATED")
	for _, d := range page.Deliveries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", d.ID, d.State, d.Attempts, d.CycleAttempts, d.EndpointID, d.CreatedAt.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil {
		fmt.Fprintf(stdout, "more: --cursor %s\n", *page.NextCursor)
	}
	return nil
}

const deliveriesShowUsage = `usage: hymical deliveries show [flags] DELIVERY_ID

Shows one delivery, its state and counters, and every attempt: outcome, HTTP
status, whether it was late, when, how long, its trace id and its error.`

func runDeliveriesShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("deliveries show", deliveriesShowUsage)
	client := clientFlags(fs, stderr)
	output := outputFlag(fs)
	id, err := fs.parseWithID(args, stdout, stderr, "delivery")
	if err != nil {
		return err
	}
	asJSON, err := output()
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var d apiwire.DeliveryDetail
	if err := c.do(ctx, http.MethodGet, "/v1/deliveries/"+url.PathEscape(id), nil, &d); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, d)
	}
	state := string(d.State)
	if d.Held {
		state += " (held: its endpoint is disabled, or it waits its turn at an ordered endpoint)"
	}
	// A terminal delivery keeps the next_attempt_at of its last claim, but
	// no worker will ever try it again: showing that time as a "next
	// attempt" told operators a failed delivery was still being retried.
	when := "next attempt " + d.NextAttemptAt.Format(time.RFC3339)
	if d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed {
		when = "completed"
		if d.CompletedAt != nil {
			when += " " + d.CompletedAt.Format(time.RFC3339)
		}
		if d.State == apiwire.StateFailed {
			when += ", no further attempt (replay it once the cause is fixed)"
		}
	}
	fmt.Fprintf(stdout, "delivery %s  endpoint %s  event %s\nstate %s  attempts %d  cycle_attempts %d  %s\n",
		d.ID, d.EndpointID, d.EventID, state, d.Attempts, d.CycleAttempts, when)
	if d.UnsentReason != "" {
		// A claim that sent nothing records no attempt, so the table below
		// cannot say why; this line does. A plugin's words may quote a URL
		// (an older server does not mask them): its secrets are hidden.
		fmt.Fprintf(stdout, "not sent (no request went out, no attempt recorded): %s\n", safeText(redact.Text(d.UnsentReason)))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tOUTCOME\tHTTP\tLATE\tSTARTED\tTOOK\tTRACE\tERROR")
	for _, a := range d.AttemptHistory {
		status := "-"
		if a.HTTPStatus != nil {
			status = fmt.Sprint(*a.HTTPStatus)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\t%s\t%s\t%s\n", a.Number, a.Outcome, status, a.Late,
			a.StartedAt.Format(time.RFC3339), a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond), dash(safeText(a.TraceID)), safeText(redact.Text(a.Error)))
	}
	return tw.Flush()
}

// safeText is text that others wrote (a plugin's or receiver's error, a
// description, a reason, a URL) made safe to print on a terminal and in a
// table: the C0 controls (tab and newline among them, which would forge a
// column or a row), DEL, the C1 controls (ESC's 8-bit twins), the
// bidirectional overrides and the line and paragraph separators are
// written as escapes, \n, \r, \t, \x1b, \u009b, \u202e; so is a byte
// that is not UTF-8. Everything else, letters of every script and emoji
// included, is printed as it is, backslashes too; -o json shows the exact
// text.
func safeText(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !clean {
			break
		}
		clean = !unsafeRune(r)
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether safeText escapes the character r.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidirectional marks, embeddings, overrides and isolates
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const replayUsage = `usage: hymical replay [flags] DELIVERY_ID
       hymical replay --state failed [--endpoint ID] [--form ID] [--limit N] [flags]

Makes finished deliveries due again, with a fresh retry allowance; the
server records who replayed them (--operator) and when. With an id, that one
delivery; with --state, every delivery in that state the filters match.
Run again with the same --idempotency-key (within 24 hours) after a failure
and the server replays nothing more, even if the replayed deliveries have
finished again since.`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", replayUsage)
	client := clientFlags(fs, stderr)
	state := fs.String("state", "", "bulk: replay every delivery in this terminal state (failed or delivered)")
	endpoint := fs.String("endpoint", "", "bulk: only this endpoint's deliveries")
	form := fs.String("form", "", "bulk: only this form's deliveries")
	limit := fs.Int("limit", 0, "bulk: at most this many (0: the server's cap)")
	key := fs.String("idempotency-key", "", "send the same key again with the same arguments and the server replays nothing more, answering as the first time")
	id, err := fs.parseWithArg(args, stdout, stderr)
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	switch {
	case id != "" && *state == "":
		var d apiwire.Delivery
		repeat, err := c.doKeyed(ctx, http.MethodPost, "/v1/deliveries/"+url.PathEscape(id)+"/replay", *key, nil, &d)
		if err != nil {
			return err
		}
		if repeat {
			fmt.Fprintf(stdout, "already replayed %s with --idempotency-key %q, so not again: it is %s now, cycle_attempts %d, attempts %d\n",
				d.ID, *key, d.State, d.CycleAttempts, d.Attempts)
			return nil
		}
		fmt.Fprintf(stdout, "replayed %s: %s, due now, cycle_attempts %d, attempts %d\n", d.ID, d.State, d.CycleAttempts, d.Attempts)
		return nil
	case id == "" && *state != "":
		var res apiwire.ReplayCount
		body := apiwire.ReplayRequest{State: *state, EndpointID: *endpoint, FormID: *form, Limit: max(*limit, 0)}
		repeat, err := c.doKeyed(ctx, http.MethodPost, "/v1/deliveries/replay", *key, body, &res)
		if err != nil {
			return err
		}
		if repeat {
			fmt.Fprintf(stdout, "already replayed %d %s deliveries with --idempotency-key %q, so none again\n", res.Count, *state, *key)
			return nil
		}
		fmt.Fprintf(stdout, "replayed %d %s deliveries\n", res.Count, *state)
		return nil
	default:
		fs.printUsage(stderr)
		return errors.New("give one delivery id, or --state for a bulk replay")
	}
}

func runEndpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "endpoints", []subcommand{
		{"add", "register an endpoint; prints its signing secret once", runEndpointsAdd},
		{"list", "every endpoint, one line each, newest first (--wide: every column, -o json)", runEndpointsList},
		{"set", "change an endpoint's controls (rate limit, in-flight cap, order, retries) or custom headers", runEndpointsSet},
		{"disable", "pause an endpoint: its deliveries are held, not failed", runEndpointsSwitch("disable")},
		{"enable", "resume a disabled endpoint", runEndpointsSwitch("enable")},
		{"rotate-secret", "give an endpoint a new signing secret; prints it once", runEndpointsRotateSecret},
		{"delete", "delete an endpoint for good; its history stays readable (--yes)", runEndpointsDelete},
	}, args, stdout, stderr)
}

const endpointsAddUsage = `usage: hymical endpoints add --url URL [flags]
       hymical endpoints add --transport NAME --endpoint-config KEY=VALUE... [flags]

Registers an endpoint and prints its id and its signing secret (v1) or, for
v1a, its public key and signing key. The secret is shown this once; run
again with the same --idempotency-key (within 24 hours) after a failure and
the server answers with the endpoint it made, and its current secret,
instead of making a second one.`

func runEndpointsAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("endpoints add", endpointsAddUsage)
	client := clientFlags(fs, stderr)
	target := fs.String("url", "", "the receiver's URL")
	transportName := fs.String("transport", "http", "the transport plugin that sends to it")
	description := fs.String("description", "", "a note for operators")
	scheme := fs.String("signature-scheme", "v1", "v1 (HMAC-SHA256, a shared whsec_ secret) or v1a (Ed25519: receivers verify with a whpk_ public key)")
	controls := controlFlags(fs)
	var forms, types, settings listFlag
	fs.Var(&forms, "form", "a form id to subscribe to (repeat; none means every form)")
	fs.Var(&types, "event-type", "an event type to subscribe to (repeat; none means every type)")
	fs.Var(&settings, "endpoint-config", "KEY=VALUE for the transport, e.g. subject=forms.new for nats (repeat)")
	var headers listFlag
	fs.Var(&headers, "header", "'Name: value', a custom header sent with every attempt (repeat); values are never shown again")
	key := fs.String("idempotency-key", "", "send the same key again with the same flags and the server returns the first endpoint")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("endpoints add takes no arguments, got %q; give the URL with --url", fs.Args())
	}
	c, err := client()
	if err != nil {
		return err
	}
	if *target == "" && len(settings) == 0 {
		return errors.New("endpoints add needs --url, or --endpoint-config for a transport that takes no URL")
	}
	epConfig := map[string]string{}
	for _, kv := range settings {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--endpoint-config %q is not KEY=VALUE", kv)
		}
		epConfig[k] = v
	}
	ctl, err := controls()
	if err != nil {
		return err
	}
	hs, err := headerFlags(headers)
	if err != nil {
		return err
	}
	body := apiwire.EndpointCreate{
		URL: *target, Transport: *transportName, FormIDs: forms, EventTypes: types, Description: *description,
		Config: epConfig, SignatureScheme: *scheme, EndpointControls: ctl, Headers: hs,
	}
	var extra http.Header
	if *key != "" {
		extra = http.Header{"Idempotency-Key": {*key}}
	}
	var created apiwire.EndpointCreated
	if err := c.doWith(ctx, http.MethodPost, "/v1/endpoints", extra, body, &created); err != nil {
		return err
	}
	// The server shows the URL with its secrets hidden already; an older
	// one does not, and a terminal's scrollback is no place for a token.
	shown := redact.URL(created.URL)
	if shown == "" {
		shown = "transport " + *transportName
	}
	if len(created.PublicKeys) == 0 {
		fmt.Fprintf(stdout, "endpoint %s → %s\nsigning secret (shown once; give it to the receiver): %s\n", created.ID, shown, created.Secret)
		return nil
	}
	// A v1a receiver needs only the public key, which stays on show;
	// the signing key is printed once, like a secret, for safekeeping.
	fmt.Fprintf(stdout, "endpoint %s → %s (signature scheme %s)\npublic key (give it to the receiver; `hymical endpoints list --wide` shows it again): %s\nsigning key (shown once; the server signs with it, the receiver does not need it): %s\n",
		created.ID, shown, created.SignatureScheme, strings.Join(created.PublicKeys, " "), created.Secret)
	return nil
}

const endpointsSetUsage = `usage: hymical endpoints set ENDPOINT_ID [flags]

Changes an endpoint's controls; a control not given keeps its value.

--header replaces the endpoint's whole set of custom headers with the ones
given: repeat it for each header to keep. 'Name: value' sets a value;
'Name' alone keeps the value the endpoint has for that name, which is never
shown. --no-headers removes them all. A value given on the command line is
seen by other users of this machine while the command runs (ps) and may be
kept in the shell's history.`

func runEndpointsSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("endpoints set", endpointsSetUsage)
	client := clientFlags(fs, stderr)
	controls := controlFlags(fs)
	var headers listFlag
	fs.Var(&headers, "header", "'Name: value' or 'Name' (keep its value): the endpoint's whole set of custom headers (repeat)")
	noHeaders := fs.Bool("no-headers", false, "remove every custom header")
	id, err := fs.parseWithID(args, stdout, stderr, "endpoint")
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	ctl, err := controls()
	if err != nil {
		return err
	}
	patch := apiwire.EndpointPatch{EndpointControls: ctl}
	switch {
	case *noHeaders && len(headers) > 0:
		return errors.New("give --header or --no-headers, not both")
	case *noHeaders:
		patch.Headers = &[]apiwire.EndpointHeader{}
	case len(headers) > 0:
		hs, err := headerFlags(headers)
		if err != nil {
			return err
		}
		patch.Headers = &hs
	}
	if ctl == (apiwire.EndpointControls{}) && patch.Headers == nil {
		fs.printUsage(stderr)
		return fmt.Errorf("endpoints set %s changes nothing: give at least one control or --header", id)
	}
	var e apiwire.Endpoint
	if err := c.do(ctx, http.MethodPatch, "/v1/endpoints/"+url.PathEscape(id), patch, &e); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "endpoint %s: %s; %s; headers %s\n", e.ID, endpointStatus(e), endpointLimits(e), headerNames(e))
	return nil
}

// runEndpointsSwitch is endpoints disable or endpoints enable.
func runEndpointsSwitch(action string) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := `usage: hymical endpoints disable [flags] ENDPOINT_ID

Pauses an endpoint: nothing is sent to it, and its deliveries, those of
events that arrive meanwhile included, are held until it is enabled again.`
	if action == "enable" {
		usage = `usage: hymical endpoints enable [flags] ENDPOINT_ID

Resumes a disabled endpoint: its held deliveries go out again.`
	}
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlagSet("endpoints "+action, usage)
		client := clientFlags(fs, stderr)
		id, err := fs.parseWithID(args, stdout, stderr, "endpoint")
		if err != nil {
			return err
		}
		c, err := client()
		if err != nil {
			return err
		}
		var e apiwire.Endpoint
		if err := c.do(ctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/"+action, nil, &e); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "endpoint %s: %s\n", e.ID, endpointStatus(e))
		return nil
	}
}

const endpointsRotateUsage = `usage: hymical endpoints rotate-secret [flags] ENDPOINT_ID

Gives an endpoint a new signing secret of its scheme and prints it once.
The secrets that signed before keep signing beside it until the time
printed (server.secret_rotation_grace), so receivers can switch over; at
most 5 secrets sign at once, so a rotation past that retires the oldest. Run
again with the same --idempotency-key (within 24 hours) after a failure and
the server answers with the secret that rotation made instead of rotating
again; if another rotation has replaced it since, it says so.`

func runEndpointsRotateSecret(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("endpoints rotate-secret", endpointsRotateUsage)
	client := clientFlags(fs, stderr)
	key := fs.String("idempotency-key", "", "send the same key again and the server returns the secret the first rotation made")
	id, err := fs.parseWithID(args, stdout, stderr, "endpoint")
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var rot apiwire.EndpointCreated
	repeat, err := c.doKeyed(ctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/rotate-secret", *key, nil, &rot)
	if err != nil {
		return err
	}
	if repeat {
		fmt.Fprintf(stdout, "already rotated with --idempotency-key %q, so not again; the secret that rotation made:\n", *key)
	}
	until := "no earlier secret was active"
	if rot.PreviousSecretsExpireAt != nil {
		until = "the previous secrets sign beside it until " + rot.PreviousSecretsExpireAt.UTC().Format(time.RFC3339)
	}
	if len(rot.PublicKeys) == 0 {
		fmt.Fprintf(stdout, "endpoint %s: new signing secret (shown once; give it to the receiver): %s\n%s\n", rot.ID, rot.Secret, until)
		return nil
	}
	fmt.Fprintf(stdout, "endpoint %s: public keys (give the first to the receiver): %s\nnew signing key (shown once; the server signs with it): %s\n%s\n",
		rot.ID, strings.Join(rot.PublicKeys, " "), rot.Secret, until)
	return nil
}

const endpointsListUsage = `usage: hymical endpoints list [flags]

Lists every endpoint, newest first, one line each, in 120 columns: its id,
transport, status (enabled, failing, or disabled and why) and target (its
URL without the query, shortened in the middle if need be, or its transport
settings). It follows the API's pages to the end, --page-size endpoints a
request. --wide shows every column in full; -o json prints the API's
answer, every page joined into one. Deleted endpoints are not listed.`

// listWidth is the width endpoints list fits its lines in.
const listWidth = 120

func runEndpointsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("endpoints list", endpointsListUsage)
	client := clientFlags(fs, stderr)
	wide := fs.Bool("wide", false, "every column, in full: forms, event types, controls, scheme, public keys, description")
	pageSize := fs.Int("page-size", 100, "endpoints asked for in each request, 1 to 500; the list follows every page")
	output := outputFlag(fs)
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("endpoints list takes no arguments, got %q", fs.Args())
	}
	asJSON, err := output()
	if err != nil {
		return err
	}
	if *pageSize < 1 || *pageSize > 500 {
		return fmt.Errorf("--page-size %d is not from 1 to 500", *pageSize)
	}
	c, err := client()
	if err != nil {
		return err
	}
	list := apiwire.EndpointList{Endpoints: []apiwire.Endpoint{}}
	cursor := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(*pageSize)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page apiwire.EndpointList
		if err := c.do(ctx, http.MethodGet, "/v1/endpoints?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		list.Endpoints = append(list.Endpoints, page.Endpoints...)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	switch {
	case asJSON:
		return printJSON(stdout, list)
	case *wide:
		return writeEndpointsWide(stdout, list.Endpoints)
	}
	return writeEndpoints(stdout, list.Endpoints, listWidth)
}

const endpointsDeleteUsage = `usage: hymical endpoints delete [flags] ENDPOINT_ID

Deletes an endpoint for good: it gets no new deliveries and takes no change
or replay, and its id is never used again, while its deliveries and their
attempts stay readable (hymical deliveries list --endpoint ENDPOINT_ID).
It cannot be undone, so it asks for --yes. An endpoint with pending or
processing deliveries is refused unless --force, which fails them with the
reason "endpoint deleted" (a request already under way still records its
outcome, as a late attempt). The operator endpoint
(endpoints.operator_endpoint) is refused: change that setting first.`

func runEndpointsDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("endpoints delete", endpointsDeleteUsage)
	client := clientFlags(fs, stderr)
	yes := fs.Bool("yes", false, "confirm the delete, which cannot be undone")
	force := fs.Bool("force", false, "also fail the endpoint's pending and processing deliveries")
	id, err := fs.parseWithID(args, stdout, stderr, "endpoint")
	if err != nil {
		return err
	}
	if !*yes {
		return fmt.Errorf("endpoints delete %s cannot be undone: run it again with --yes to delete the endpoint", id)
	}
	c, err := client()
	if err != nil {
		return err
	}
	path := "/v1/endpoints/" + url.PathEscape(id)
	if *force {
		path += "?force=true"
	}
	var res apiwire.EndpointDeleted
	if err := c.do(ctx, http.MethodDelete, path, nil, &res); err != nil {
		var ae *apiwire.Error
		if errors.As(err, &ae) && ae.Code == apiwire.CodeEndpointBusy {
			return fmt.Errorf("%w; with this command: add --force", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "endpoint %s deleted at %s", res.ID, res.DeletedAt.Format(time.RFC3339))
	if n := res.FailedPending + res.FailedProcessing; n > 0 {
		fmt.Fprintf(stdout, "; %d pending and %d processing deliveries failed with the reason \"endpoint deleted\"", res.FailedPending, res.FailedProcessing)
	}
	fmt.Fprintln(stdout)
	return nil
}

// writeEndpoints writes the narrow list: the id in full (it is what the
// other commands take), the transport, a short status, and the target in
// what is left of width.
func writeEndpoints(w io.Writer, eps []apiwire.Endpoint, width int) error {
	const gap = 2
	type row struct{ id, transport, status, target string }
	rows := []row{{"ID", "TRANSPORT", "STATUS", "TARGET"}}
	for _, e := range eps {
		rows = append(rows, row{safeText(e.ID), clipRight(safeText(e.Transport), 16), clipRight(shortStatus(e), 24), endpointTarget(e)})
	}
	var idW, trW, stW int
	for _, r := range rows {
		idW = max(idW, utf8.RuneCountInString(r.id))
		trW = max(trW, utf8.RuneCountInString(r.transport))
		stW = max(stW, utf8.RuneCountInString(r.status))
	}
	targetW := max(width-idW-trW-stW-3*gap, len("TARGET"))
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		b.WriteString(pad(r.id, idW+gap))
		b.WriteString(pad(r.transport, trW+gap))
		b.WriteString(pad(r.status, stW+gap))
		b.WriteString(shortenURL(r.target, targetW))
		if _, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " ")); err != nil {
			return err
		}
	}
	return nil
}

// writeEndpointsWide writes every column in full, as wide as it takes.
func writeEndpointsWide(w io.Writer, eps []apiwire.Endpoint) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTRANSPORT\tURL\tCONFIG\tFORMS\tEVENT TYPES\tSTATUS\tCONTROLS\tHEADERS\tSCHEME\tSECRETS\tPUBLIC KEYS\tDESCRIPTION")
	for _, e := range eps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", safeText(e.ID), safeText(e.Transport), dash(safeText(redact.URL(e.URL))), dash(configText(e.Config)),
			dash(safeText(strings.Join(e.FormIDs, ","))), dash(safeText(strings.Join(e.EventTypes, ","))), endpointStatus(e), endpointLimits(e), headerNames(e),
			dash(safeText(e.SignatureScheme)), len(e.Secrets), dash(safeText(strings.Join(e.PublicKeys, " "))), dash(safeText(oneLine(e.Description))))
	}
	return tw.Flush()
}

// shortStatus is the status in a word or two: enabled, failing (enabled,
// every attempt failing lately), or disabled (and why).
func shortStatus(e apiwire.Endpoint) string {
	switch {
	case e.Disabled && e.DisabledReason != "":
		return "disabled (" + safeText(e.DisabledReason) + ")"
	case e.Disabled:
		return "disabled"
	case e.FailingSince != nil:
		return "failing"
	}
	return "enabled"
}

// endpointStatus is the status in full, with when.
func endpointStatus(e apiwire.Endpoint) string {
	var s string
	switch {
	case e.Disabled && e.DisabledAt != nil:
		s = fmt.Sprintf("disabled (%s, %s; deliveries held)", safeText(e.DisabledReason), e.DisabledAt.UTC().Format(time.RFC3339))
	case e.Disabled:
		s = "disabled (" + safeText(e.DisabledReason) + "; deliveries held)"
	default:
		s = "enabled"
	}
	if e.FailingSince != nil {
		s += ", failing since " + e.FailingSince.UTC().Format(time.RFC3339)
	}
	return s
}

// endpointLimits names the endpoint's controls; "none" when it has none.
func endpointLimits(e apiwire.Endpoint) string {
	var parts []string
	if e.RateLimit > 0 {
		burst := ""
		if e.RateBurst > 0 {
			burst = fmt.Sprintf(" burst %d", e.RateBurst)
		}
		parts = append(parts, fmt.Sprintf("%s/s%s", strconv.FormatFloat(e.RateLimit, 'g', -1, 64), burst))
	}
	if e.MaxInFlight > 0 {
		parts = append(parts, fmt.Sprintf("%d in flight", e.MaxInFlight))
	}
	if e.Ordered {
		parts = append(parts, "ordered")
	}
	if len(e.RetrySchedule) > 0 {
		parts = append(parts, "retries "+safeText(strings.Join(e.RetrySchedule, ",")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// endpointTarget is where the endpoint sends: its URL, or for a transport
// that takes none, its settings. The server hides the URL's secrets; an
// older one does not, so they are hidden here too.
func endpointTarget(e apiwire.Endpoint) string {
	if e.URL != "" {
		return safeText(redact.URL(e.URL))
	}
	return dash(configText(e.Config))
}

// configText is a transport's settings as KEY=VALUE, sorted by key. The API
// has already redacted what is secret; an older server did not hide a URL
// value's user name, so the one rule runs here again.
func configText(cfg map[string]string) string {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = safeText(k + "=" + redact.Value(k, cfg[k]))
	}
	return strings.Join(parts, ",")
}

// shortenURL fits a URL in width columns. Its query goes first (it is the
// least telling part and may hold a token), shown as "?…"; then the middle
// of the path, so the scheme and host and the end of the path stay. Text
// that is not a URL is cut at the end.
func shortenURL(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return clipRight(s, width)
	}
	suffix := ""
	if base, _, ok := strings.Cut(s, "?"); ok {
		s, suffix = base, "?…"
	}
	width -= len([]rune(suffix))
	head := utf8.RuneCountInString(u.Scheme + "://" + u.Host)
	if head+2 > width {
		return clipRight(s+suffix, width+len([]rune(suffix)))
	}
	return clipMiddle(s, width, head+1) + suffix
}

// clipRight cuts s to width runes, the last of them "…".
func clipRight(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	if width < 1 {
		return ""
	}
	return string(r[:width-1]) + "…"
}

// clipMiddle cuts s to width runes by replacing its middle with "…",
// keeping at least its first keep runes.
func clipMiddle(s string, width, keep int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	tail := width - 1 - keep
	if tail < 0 {
		return clipRight(s, width)
	}
	// Share what is left between the two sides, favouring the end of the
	// path, which names the hook, over the start.
	extra := tail / 3
	keep += extra
	tail -= extra
	return string(r[:keep]) + "…" + string(r[len(r)-tail:])
}

// pad fills s with spaces to width runes.
func pad(s string, width int) string {
	if n := utf8.RuneCountInString(s); n < width {
		return s + strings.Repeat(" ", width-n)
	}
	return s
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// headerFlags reads --header values: "Name: value", or "Name" alone for
// a value the server keeps. The error never repeats a value.
func headerFlags(flags []string) ([]apiwire.EndpointHeader, error) {
	out := make([]apiwire.EndpointHeader, 0, len(flags))
	for i, f := range flags {
		name, value, hasValue := strings.Cut(f, ":")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("--header %d has no name: write it as 'Name: value'", i+1)
		}
		h := apiwire.EndpointHeader{Name: name}
		if hasValue {
			v := strings.TrimSpace(value)
			h.Value = &v
		}
		out = append(out, h)
	}
	return out, nil
}

// headerNames lists an endpoint's custom headers by name, each value
// masked; "none" when it has none. The server sends no value, and none
// would be printed if an older one did.
func headerNames(e apiwire.Endpoint) string {
	if len(e.Headers) == 0 {
		return "none"
	}
	names := make([]string, len(e.Headers))
	for i, h := range e.Headers {
		names[i] = safeText(h.Name) + ": " + apiwire.HeaderValueMask
	}
	return strings.Join(names, ", ")
}

// controlFlags declares the endpoint control flags and returns a function
// giving the controls that were set.
func controlFlags(fs *flagSet) func() (apiwire.EndpointControls, error) {
	rate := fs.String("rate-limit", "", "most sends per second, across every server process (0: no limit)")
	burst := fs.String("rate-burst", "", "sends allowed at once after a quiet spell (0: the rate, rounded up)")
	inFlight := fs.String("max-in-flight", "", "most sends under way at once, across every server process (0: no cap)")
	ordered := fs.String("ordered", "", "true sends one delivery at a time, in order")
	schedule := fs.String("retry-schedule", "", "this endpoint's retry delays, e.g. 30s,5m,1h (\"none\": the server's)")
	return func() (apiwire.EndpointControls, error) {
		var c apiwire.EndpointControls
		if *rate != "" {
			v, err := strconv.ParseFloat(*rate, 64)
			if err != nil {
				return c, fmt.Errorf("--rate-limit %q is not a number of sends per second", *rate)
			}
			c.RateLimit = &v
		}
		for _, f := range []struct {
			name, text string
			dst        **int
		}{{"rate-burst", *burst, &c.RateBurst}, {"max-in-flight", *inFlight, &c.MaxInFlight}} {
			if f.text == "" {
				continue
			}
			v, err := strconv.Atoi(f.text)
			if err != nil {
				return c, fmt.Errorf("--%s %q is not a whole number", f.name, f.text)
			}
			*f.dst = &v
		}
		if *ordered != "" {
			v, err := strconv.ParseBool(*ordered)
			if err != nil {
				return c, fmt.Errorf("--ordered %q is not true or false", *ordered)
			}
			c.Ordered = &v
		}
		switch *schedule {
		case "":
		case "none":
			c.RetrySchedule = &[]string{}
		default:
			delays := strings.Split(*schedule, ",")
			c.RetrySchedule = &delays
		}
		return c, nil
	}
}

const submitUsage = `usage: hymical submit [flags]

Sends one form submission, a sample unless --data says otherwise, and prints
its submission id and the deliveries it fanned out to.`

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("submit", submitUsage)
	client := clientFlags(fs, stderr)
	form := fs.String("form", "form_demo", "the form id")
	data := fs.String("data", `{"name":"Ada Lovelace","email":"ada@example.com","message":"Hello"}`, "the submission's data, a JSON object")
	key := fs.String("idempotency-key", "", "send the same key again and the server returns the first submission")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("submit takes no arguments, got %q; give the data with --data", fs.Args())
	}
	c, err := client()
	if err != nil {
		return err
	}
	var body json.RawMessage
	if err := json.Unmarshal([]byte(*data), &body); err != nil {
		return fmt.Errorf("--data is not JSON: %w", err)
	}
	var extra http.Header
	if *key != "" {
		extra = http.Header{"Idempotency-Key": {*key}}
	}
	var res apiwire.IngestResult
	if err := c.doWith(ctx, http.MethodPost, "/v1/forms/"+url.PathEscape(*form)+"/submissions", extra, body, &res); err != nil {
		return err
	}
	if len(res.Deliveries) == 0 {
		// Accepted and stored, but nothing will be sent: the question a user
		// asks next is why, and an empty list after a colon did not say.
		fmt.Fprintf(stdout, "submission %s (event %s) → 0 deliveries: no endpoint takes submissions of form %q "+
			"(hymical endpoints list --wide shows each endpoint's forms and event types)\n", res.SubmissionID, res.EventID, *form)
		return nil
	}
	fmt.Fprintf(stdout, "submission %s (event %s) → %d deliveries: %s\n", res.SubmissionID, res.EventID, len(res.Deliveries), strings.Join(res.Deliveries, " "))
	return nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
