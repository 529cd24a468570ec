// Command leaky is a transport plugin for the worker's tests, written only
// against sdk/transport as a third-party plugin would be, that is careless
// with its endpoint's URL: on every Send it logs the URL to stderr (a plain
// line and an hclog JSON line) and answers with error text that quotes the
// URL whole, as Go's *url.Error does, and its token on its own.
//
// An endpoint config "mode" of "refuse" answers that no request went out;
// "echo-headers" is a retryable attempt whose error quotes every header
// value it was given, alone, as a receiver's answer might; anything else
// is a retryable attempt.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/hymical/hymical/sdk/transport"
)

type leaky struct{}

func (leaky) Configure(context.Context, transport.Settings) error { return nil }

func (leaky) Validate(context.Context, transport.Endpoint) error { return nil }

func (leaky) Send(_ context.Context, msg transport.Message) transport.Outcome {
	target := msg.Endpoint.URL
	token := ""
	if u, err := url.Parse(target); err == nil {
		token = u.Query().Get("token")
	}
	fmt.Fprintf(os.Stderr, "leaky: sending %s to %s\n", msg.DeliveryID, target)
	line, _ := json.Marshal(map[string]string{"@level": "info", "@message": "leaky sends to " + target, "url": target})
	fmt.Fprintf(os.Stderr, "%s\n", line)
	if msg.Endpoint.Config["mode"] == "echo-headers" {
		words := ""
		for _, h := range msg.Headers {
			words += " " + h.Value
			if _, token, ok := strings.Cut(h.Value, " "); ok {
				words += " (" + token + ")"
			}
		}
		return transport.Retryable(0, "the receiver said: bad credentials"+words)
	}
	if msg.Endpoint.Config["mode"] == "refuse" {
		return transport.Refused(fmt.Sprintf("refused %s (token %s)", target, token))
	}
	return transport.Retryable(0, fmt.Sprintf("Post %q: dial tcp: connection refused (token %s)", target, token))
}

func main() { transport.Serve(leaky{}) }
