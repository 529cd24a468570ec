package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The operator commands talk to a running server's HTTP API, so they see
// exactly what the API enforces (auth, validation, the audit of replays)
// and work against a server on another host as well as this one.

// apiClient calls the HTTP API with the admin token.
type apiClient struct {
	base     string
	token    string
	operator string
	http     *http.Client
}

// clientFlags adds the flags every API command takes.
func clientFlags(fs *flag.FlagSet) func() (*apiClient, error) {
	server := fs.String("server", envOr("HYMICAL_SERVER", "http://127.0.0.1:8080"), "base URL of the running server (env HYMICAL_SERVER)")
	token := fs.String("token", "", "admin token (default: env FORMS_SERVER_ADMIN_TOKEN; a flag is visible in the process list)")
	operator := fs.String("operator", envOr("USER", ""), "who you are, recorded in the replay audit")
	return func() (*apiClient, error) {
		t := *token
		if t == "" {
			t = os.Getenv("FORMS_SERVER_ADMIN_TOKEN")
		}
		u, err := url.Parse(*server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--server %q is not an http(s) URL such as http://127.0.0.1:8080", *server)
		}
		return &apiClient{base: strings.TrimRight(*server, "/"), token: t, operator: *operator, http: &http.Client{Timeout: 30 * time.Second}}, nil
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// apiError is the API's error shape.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("server answered %d %s: %s", e.Status, e.Code, e.Message)
}

// do sends body (nil for none) and decodes the answer into out (nil to drop it).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(ctx, method, path, nil, body, out)
}

// doWith is do with extra request headers.
func (c *apiClient) doWith(ctx context.Context, method, path string, extra http.Header, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
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
		return fmt.Errorf("is the server running at %s? %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("server answered %s", resp.Status)
		}
		e.Error.Status = resp.StatusCode
		if resp.StatusCode == http.StatusUnauthorized && c.token == "" {
			e.Error.Message += " (set FORMS_SERVER_ADMIN_TOKEN or pass --token)"
		}
		return &e.Error
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

type deliveryView struct {
	ID             string     `json:"id"`
	EndpointID     string     `json:"endpoint_id"`
	EventID        string     `json:"event_id"`
	State          string     `json:"state"`
	Attempts       int        `json:"attempts"`
	CycleAttempts  int        `json:"cycle_attempts"`
	NextAttemptAt  time.Time  `json:"next_attempt_at"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	CreatedAt      time.Time  `json:"created_at"`
	CompletedAt    *time.Time `json:"completed_at"`
	Held           bool       `json:"held"`
}

type attemptView struct {
	Number     int       `json:"number"`
	Outcome    string    `json:"outcome"`
	HTTPStatus *int      `json:"http_status"`
	Error      string    `json:"error"`
	Late       bool      `json:"late"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	TraceID    string    `json:"trace_id"`
}

func runDeliveries(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show") {
		return errors.New("usage: hymical deliveries list [filters] | hymical deliveries show DELIVERY_ID")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("deliveries "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	state := fs.String("state", "", "pending, processing, delivered or failed")
	endpoint := fs.String("endpoint", "", "endpoint id")
	form := fs.String("form", "", "form id")
	limit := fs.Int("limit", 50, "page size")
	cursor := fs.String("cursor", "", "the next_cursor a previous page printed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	if sub == "show" {
		if fs.NArg() != 1 {
			return errors.New("usage: hymical deliveries show DELIVERY_ID")
		}
		id := url.PathEscape(fs.Arg(0))
		var d deliveryView
		if err := c.do(ctx, http.MethodGet, "/v1/deliveries/"+id, nil, &d); err != nil {
			return err
		}
		var as struct {
			Attempts []attemptView `json:"attempts"`
		}
		if err := c.do(ctx, http.MethodGet, "/v1/deliveries/"+id+"/attempts", nil, &as); err != nil {
			return err
		}
		state := d.State
		if d.Held {
			state += " (held: its endpoint is disabled, or it waits its turn at an ordered endpoint)"
		}
		fmt.Fprintf(stdout, "delivery %s  endpoint %s  event %s\nstate %s  attempts %d  cycle_attempts %d  next attempt %s\n",
			d.ID, d.EndpointID, d.EventID, state, d.Attempts, d.CycleAttempts, d.NextAttemptAt.Format(time.RFC3339))
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tOUTCOME\tHTTP\tLATE\tSTARTED\tTOOK\tTRACE\tERROR")
		for _, a := range as.Attempts {
			status := "-"
			if a.HTTPStatus != nil {
				status = fmt.Sprint(*a.HTTPStatus)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\t%s\t%s\t%s\n", a.Number, a.Outcome, status, a.Late,
				a.StartedAt.Format(time.RFC3339), a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond), dash(a.TraceID), a.Error)
		}
		return tw.Flush()
	}
	q := url.Values{}
	for k, v := range map[string]string{"state": *state, "endpoint_id": *endpoint, "form_id": *form, "cursor": *cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("limit", fmt.Sprint(*limit))
	var page struct {
		Deliveries []deliveryView `json:"deliveries"`
		NextCursor *string        `json:"next_cursor"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/deliveries?"+q.Encode(), nil, &page); err != nil {
		return err
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

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	state := fs.String("state", "", "bulk: replay every delivery in this terminal state (failed or delivered)")
	endpoint := fs.String("endpoint", "", "bulk: only this endpoint's deliveries")
	form := fs.String("form", "", "bulk: only this form's deliveries")
	limit := fs.Int("limit", 0, "bulk: at most this many (0: the server's cap)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hymical replay DELIVERY_ID\n       hymical replay --state failed [--endpoint ID] [--form ID] [--limit N]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	switch {
	case fs.NArg() == 1 && *state == "":
		var d deliveryView
		if err := c.do(ctx, http.MethodPost, "/v1/deliveries/"+url.PathEscape(fs.Arg(0))+"/replay", nil, &d); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replayed %s: %s, due now, cycle_attempts %d, attempts %d\n", d.ID, d.State, d.CycleAttempts, d.Attempts)
		return nil
	case fs.NArg() == 0 && *state != "":
		body := map[string]any{"state": *state}
		if *endpoint != "" {
			body["endpoint_id"] = *endpoint
		}
		if *form != "" {
			body["form_id"] = *form
		}
		if *limit > 0 {
			body["limit"] = *limit
		}
		var res struct {
			Count int `json:"count"`
		}
		if err := c.do(ctx, http.MethodPost, "/v1/deliveries/replay", body, &res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replayed %d %s deliveries\n", res.Count, *state)
		return nil
	default:
		fs.Usage()
		return errors.New("give one delivery id, or --state for a bulk replay")
	}
}

const endpointsUsage = `usage:
  hymical endpoints add --url URL [--form ID]... [--endpoint-config KEY=VALUE]... [--signature-scheme v1|v1a] [controls]
  hymical endpoints set ID [controls]
  hymical endpoints disable ID | hymical endpoints enable ID
  hymical endpoints list
controls: --rate-limit N --rate-burst N --max-in-flight N --ordered=true|false --retry-schedule 30s,5m,1h`

func runEndpoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"add", "set", "disable", "enable", "list"}, args[0]) {
		return errors.New(endpointsUsage)
	}
	sub, args := args[0], args[1:]
	var id string
	if sub == "set" || sub == "disable" || sub == "enable" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Errorf("endpoints %s needs the endpoint id first\n%s", sub, endpointsUsage)
		}
		id, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("endpoints "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	target := fs.String("url", "", "add: the receiver's URL")
	transportName := fs.String("transport", "http", "add: the transport plugin")
	description := fs.String("description", "", "add: a note for operators")
	scheme := fs.String("signature-scheme", "v1", "add: v1 (HMAC-SHA256, a shared whsec_ secret) or v1a (Ed25519: receivers verify with a whpk_ public key)")
	controls := controlFlags(fs)
	var forms, types, settings listFlag
	fs.Var(&forms, "form", "add: a form id to subscribe to (repeat; none means every form)")
	fs.Var(&types, "event-type", "add: an event type to subscribe to (repeat; none means every type)")
	fs.Var(&settings, "endpoint-config", "add: KEY=VALUE for the transport, e.g. subject=forms.new for nats (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	switch sub {
	case "disable", "enable":
		var e endpointStatus
		if err := c.do(ctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/"+sub, nil, &e); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "endpoint %s: %s\n", e.ID, e.status())
		return nil
	case "set":
		body, err := controls()
		if err != nil {
			return err
		}
		if len(body) == 0 {
			return fmt.Errorf("endpoints set %s changes nothing: give at least one control\n%s", id, endpointsUsage)
		}
		var e endpointStatus
		if err := c.do(ctx, http.MethodPatch, "/v1/endpoints/"+url.PathEscape(id), body, &e); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "endpoint %s: %s; %s\n", e.ID, e.status(), e.limits())
		return nil
	}
	if sub == "add" {
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
		body, err := controls()
		if err != nil {
			return err
		}
		maps.Copy(body, map[string]any{"url": *target, "transport": *transportName, "form_ids": forms.list(), "event_types": types.list(), "description": *description, "config": epConfig,
			"signature_scheme": *scheme})
		var created struct {
			ID         string   `json:"id"`
			URL        string   `json:"url"`
			Secret     string   `json:"secret"`
			Scheme     string   `json:"signature_scheme"`
			PublicKeys []string `json:"public_keys"`
		}
		if err := c.do(ctx, http.MethodPost, "/v1/endpoints", body, &created); err != nil {
			return err
		}
		target := created.URL
		if target == "" {
			target = "transport " + *transportName
		}
		if len(created.PublicKeys) == 0 {
			fmt.Fprintf(stdout, "endpoint %s → %s\nsigning secret (shown once; give it to the receiver): %s\n", created.ID, target, created.Secret)
			return nil
		}
		// A v1a receiver needs only the public key, which stays on show;
		// the signing key is printed once, like a secret, for safekeeping.
		fmt.Fprintf(stdout, "endpoint %s → %s (signature scheme %s)\npublic key (give it to the receiver; `hymical endpoints list` shows it again): %s\nsigning key (shown once; the server signs with it, the receiver does not need it): %s\n",
			created.ID, target, created.Scheme, strings.Join(created.PublicKeys, " "), created.Secret)
		return nil
	}
	var list struct {
		Endpoints []struct {
			endpointStatus
			URL        string   `json:"url"`
			Transport  string   `json:"transport"`
			FormIDs    []string `json:"form_ids"`
			Scheme     string   `json:"signature_scheme"`
			PublicKeys []string `json:"public_keys"`
		} `json:"endpoints"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/endpoints", nil, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTRANSPORT\tURL\tFORMS\tSTATUS\tCONTROLS\tSCHEME\tPUBLIC KEYS")
	for _, e := range list.Endpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Transport, e.URL, dash(strings.Join(e.FormIDs, ",")), e.status(),
			e.limits(), dash(e.Scheme), dash(strings.Join(e.PublicKeys, " ")))
	}
	return tw.Flush()
}

// endpointStatus is what the CLI shows of an endpoint's state and controls.
type endpointStatus struct {
	ID             string     `json:"id"`
	Disabled       bool       `json:"disabled"`
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason string     `json:"disabled_reason"`
	FailingSince   *time.Time `json:"failing_since"`
	RateLimit      float64    `json:"rate_limit"`
	RateBurst      int        `json:"rate_burst"`
	MaxInFlight    int        `json:"max_in_flight"`
	Ordered        bool       `json:"ordered"`
	RetrySchedule  []string   `json:"retry_schedule"`
}

func (e endpointStatus) status() string {
	var s string
	switch {
	case e.Disabled && e.DisabledAt != nil:
		s = fmt.Sprintf("disabled (%s, %s; deliveries held)", e.DisabledReason, e.DisabledAt.UTC().Format(time.RFC3339))
	case e.Disabled:
		s = "disabled (" + e.DisabledReason + "; deliveries held)"
	default:
		s = "enabled"
	}
	if e.FailingSince != nil {
		s += ", failing since " + e.FailingSince.UTC().Format(time.RFC3339)
	}
	return s
}

func (e endpointStatus) limits() string {
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
		parts = append(parts, "retries "+strings.Join(e.RetrySchedule, ","))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// controlFlags declares the endpoint control flags and returns a function
// giving the JSON fields of the ones that were set.
func controlFlags(fs *flag.FlagSet) func() (map[string]any, error) {
	rate := fs.String("rate-limit", "", "add, set: most sends per second, across every server process (0: no limit)")
	burst := fs.String("rate-burst", "", "add, set: sends allowed at once after a quiet spell (0: the rate, rounded up)")
	inFlight := fs.String("max-in-flight", "", "add, set: most sends under way at once, across every server process (0: no cap)")
	ordered := fs.String("ordered", "", "add, set: true sends one delivery at a time, in order")
	schedule := fs.String("retry-schedule", "", "add, set: this endpoint's retry delays, e.g. 30s,5m,1h (\"none\": the server's)")
	return func() (map[string]any, error) {
		out := map[string]any{}
		if *rate != "" {
			v, err := strconv.ParseFloat(*rate, 64)
			if err != nil {
				return nil, fmt.Errorf("--rate-limit %q is not a number of sends per second", *rate)
			}
			out["rate_limit"] = v
		}
		for flagName, field := range map[string]struct {
			text *string
			key  string
		}{"rate-burst": {burst, "rate_burst"}, "max-in-flight": {inFlight, "max_in_flight"}} {
			if *field.text == "" {
				continue
			}
			v, err := strconv.Atoi(*field.text)
			if err != nil {
				return nil, fmt.Errorf("--%s %q is not a whole number", flagName, *field.text)
			}
			out[field.key] = v
		}
		if *ordered != "" {
			v, err := strconv.ParseBool(*ordered)
			if err != nil {
				return nil, fmt.Errorf("--ordered %q is not true or false", *ordered)
			}
			out["ordered"] = v
		}
		switch *schedule {
		case "":
		case "none":
			out["retry_schedule"] = []string{}
		default:
			out["retry_schedule"] = strings.Split(*schedule, ",")
		}
		return out, nil
	}
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	form := fs.String("form", "form_demo", "the form id")
	data := fs.String("data", `{"name":"Ada Lovelace","email":"ada@example.com","message":"Hello"}`, "the submission's data, a JSON object")
	key := fs.String("idempotency-key", "", "send the same key again and the server returns the first submission")
	if err := fs.Parse(args); err != nil {
		return err
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
	var res struct {
		SubmissionID string   `json:"submission_id"`
		EventID      string   `json:"event_id"`
		Deliveries   []string `json:"deliveries"`
	}
	if err := c.doWith(ctx, http.MethodPost, "/v1/forms/"+url.PathEscape(*form)+"/submissions", extra, body, &res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "submission %s (event %s) → %d deliveries: %s\n", res.SubmissionID, res.EventID, len(res.Deliveries), strings.Join(res.Deliveries, " "))
	return nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (l listFlag) list() []string {
	if l == nil {
		return []string{}
	}
	return l
}
