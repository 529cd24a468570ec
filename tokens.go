package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hymical/hymical/server/api/apiwire"
)

func runTokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "tokens", []subcommand{
		{"create", "make a token scoped to some forms; prints it once", runTokensCreate},
		{"list", "the tokens not revoked, newest first (-o json)", runTokensList},
		{"revoke", "revoke a token: its next request is refused", runTokensRevoke},
	}, args, stdout, stderr)
}

const tokensCreateUsage = `usage: hymical tokens create --form ID... --expires-in DURATION [flags]

Makes an API token that reaches only the endpoints and deliveries of the
forms given (docs/api.md, "Scoped tokens and portal links") and prints it,
this once: the server keeps only its SHA-256. It expires after
--expires-in (at most 8760h, a year); --read-only makes one that may only
read.`

func runTokensCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens create", tokensCreateUsage)
	client := clientFlags(fs, stderr)
	name := fs.String("name", "", "what the token is for, shown by tokens list")
	expires := fs.String("expires-in", "", "how long the token lasts, such as 720h (required)")
	readOnly := fs.Bool("read-only", false, "the token may only read")
	var forms listFlag
	fs.Var(&forms, "form", "a form id of the scope (repeat; at least one)")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("tokens create takes no arguments, got %q; give forms with --form", fs.Args())
	}
	if len(forms) == 0 || *expires == "" {
		return fmt.Errorf("tokens create needs --form (one or more) and --expires-in, such as --form contact --expires-in 720h")
	}
	c, err := client()
	if err != nil {
		return err
	}
	var made apiwire.TokenCreated
	body := apiwire.TokenCreate{Name: *name, Forms: forms, ExpiresIn: *expires, ReadOnly: *readOnly}
	if err := c.do(ctx, http.MethodPost, "/v1/tokens", body, &made); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "token %s for forms %s, %s, expires %s\ntoken (shown once; the server keeps only its hash): %s\n",
		made.ID, strings.Join(made.Forms, ", "), tokenAccess(made.ReadOnly), made.ExpiresAt.UTC().Format(time.RFC3339), made.Secret)
	return nil
}

func tokenAccess(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}

const tokensListUsage = `usage: hymical tokens list [flags]

Lists the scoped tokens that are not revoked, newest first, expired ones
too: never a token's secret, which the server does not have.`

func runTokensList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens list", tokensListUsage)
	client := clientFlags(fs, stderr)
	output := outputFlag(fs)
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("tokens list takes no arguments, got %q", fs.Args())
	}
	asJSON, err := output()
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var list apiwire.TokenList
	if err := c.do(ctx, http.MethodGet, "/v1/tokens", nil, &list); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tFORMS\tACCESS\tEXPIRES")
	now := time.Now()
	for _, t := range list.Tokens {
		exp := t.ExpiresAt.UTC().Format(time.RFC3339)
		if !now.Before(t.ExpiresAt) {
			exp += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, dash(safeText(t.Name)), safeText(strings.Join(t.Forms, ",")), tokenAccess(t.ReadOnly), exp)
	}
	return tw.Flush()
}

const tokensRevokeUsage = `usage: hymical tokens revoke [flags] TOKEN_ID

Revokes a scoped token: every server sharing the database refuses its next
request. Revoking a revoked token changes nothing.`

func runTokensRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens revoke", tokensRevokeUsage)
	client := clientFlags(fs, stderr)
	id, err := fs.parseWithID(args, stdout, stderr, "token")
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var t apiwire.Token
	if err := c.do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, &t); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "token %s revoked at %s\n", t.ID, t.RevokedAt.UTC().Format(time.RFC3339))
	return nil
}

func runPortal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runGroup(ctx, "portal", []subcommand{
		{"link", "make a single-use link that opens the portal for some forms", runPortalLink},
		{"list", "the portal links, newest first, and what became of them (-o json)", runPortalList},
		{"revoke", "revoke a link: it no longer opens, and its session ends", runPortalRevoke},
	}, args, stdout, stderr)
}

const portalLinkUsage = `usage: hymical portal link --form ID... --ttl DURATION [flags]

Prints a link that opens the portal once, within 10 minutes, into a session
for the forms given that lasts --ttl (at most 24h). Its host is the one
--server names. The link's id, printed under it, is what portal revoke
takes to end the session early.`

func runPortalLink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("portal link", portalLinkUsage)
	client := clientFlags(fs, stderr)
	ttl := fs.String("ttl", "1h", "how long the session lasts once the link is opened")
	readOnly := fs.Bool("read-only", false, "the session may only read")
	var forms listFlag
	fs.Var(&forms, "form", "a form id of the scope (repeat; at least one)")
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 || len(forms) == 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("portal link needs --form (one or more) and takes no arguments")
	}
	c, err := client()
	if err != nil {
		return err
	}
	var s apiwire.PortalSession
	if err := c.do(ctx, http.MethodPost, "/v1/portal/sessions", apiwire.PortalSessionCreate{Forms: forms, TTL: *ttl, ReadOnly: *readOnly}, &s); err != nil {
		return err
	}
	// The link alone on the first line, so a script can take it with head -1.
	fmt.Fprintf(stdout, "%s\n(link %s: opens once, before %s; hymical portal revoke %s ends it and its session)\n",
		s.URL, s.ID, s.ExpiresAt.UTC().Format(time.RFC3339), s.ID)
	return nil
}

const portalListUsage = `usage: hymical portal list [flags]

Lists the portal links, newest first, a page at a time: used, expired and
revoked ones too, until retention removes them. STATUS says what became of
each: unused (and until when it opens), in use (until when its session
lasts), ended, expired or revoked. Never a link's secret, which the server
does not have.`

func runPortalList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("portal list", portalListUsage)
	client := clientFlags(fs, stderr)
	limit := fs.Int("limit", 50, "page size")
	cursor := fs.String("cursor", "", "the next_cursor a previous page printed")
	output := outputFlag(fs)
	if err := fs.parse(args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.printUsage(stderr)
		return fmt.Errorf("portal list takes no arguments, got %q", fs.Args())
	}
	asJSON, err := output()
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	var list apiwire.PortalLinkList
	if err := c.do(ctx, http.MethodGet, "/v1/portal/sessions?"+q.Encode(), nil, &list); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFORMS\tACCESS\tCREATED\tSTATUS")
	now := time.Now()
	for _, l := range list.Links {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.ID, safeText(strings.Join(l.Forms, ",")), tokenAccess(l.ReadOnly),
			l.CreatedAt.UTC().Format(time.RFC3339), portalLinkStatus(l, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.NextCursor != nil {
		fmt.Fprintf(stdout, "more: --cursor %s\n", *list.NextCursor)
	}
	return nil
}

// portalLinkStatus says what became of a link at now.
func portalLinkStatus(l apiwire.PortalLink, now time.Time) string {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case l.RevokedAt != nil:
		return "revoked " + at(*l.RevokedAt)
	case l.UsedAt == nil && now.Before(l.ExpiresAt):
		return "unused, opens until " + at(l.ExpiresAt)
	case l.UsedAt == nil:
		return "expired unused " + at(l.ExpiresAt)
	case l.SessionExpiresAt == nil:
		return "used " + at(*l.UsedAt)
	case now.Before(*l.SessionExpiresAt):
		return "in use until " + at(*l.SessionExpiresAt)
	}
	return "ended " + at(*l.SessionExpiresAt)
}

const portalRevokeUsage = `usage: hymical portal revoke [flags] LINK_ID

Revokes a portal link (the id portal link and portal list print): an
unused link no longer opens, and the session it became ends at its next
request on every server sharing the database. Revoking a revoked link
changes nothing.`

func runPortalRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("portal revoke", portalRevokeUsage)
	client := clientFlags(fs, stderr)
	id, err := fs.parseWithID(args, stdout, stderr, "link")
	if err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var l apiwire.PortalLink
	if err := c.do(ctx, http.MethodDelete, "/v1/portal/sessions/"+url.PathEscape(id), nil, &l); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "portal link %s revoked at %s\n", l.ID, l.RevokedAt.UTC().Format(time.RFC3339))
	return nil
}
