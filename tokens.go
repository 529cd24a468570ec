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
	}, args, stdout, stderr)
}

const portalLinkUsage = `usage: hymical portal link --form ID... --ttl DURATION [flags]

Prints a link that opens the portal once, within 10 minutes, into a session
for the forms given that lasts --ttl (at most 24h). Its host is the one
--server names.`

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
	fmt.Fprintf(stdout, "%s\n(opens once, before %s)\n", s.URL, s.ExpiresAt.UTC().Format(time.RFC3339))
	return nil
}
