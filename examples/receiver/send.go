package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
)

// runSend plays the sender for trying the receiver without a Hymical server:
// it builds one submission.received event the way Hymical does, and POSTs
// it -times times, each signed afresh as a new attempt of one delivery
// would be. The receiver should answer 204 once and 200 after that.
func runSend(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080"+WebhookPath, "the receiver's webhook URL")
	times := fs.Int("times", 2, "how many times to deliver the same submission")
	subID := fs.String("submission", "", "submission id to send (default: a new sub_<32 hex>)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sec, err := secrets(getenv)
	if err != nil {
		return err
	}
	if *times < 1 {
		return fmt.Errorf("-times must be at least 1, got %d", *times)
	}
	if *subID == "" {
		*subID = newID("sub")
	}
	body, err := sampleEvent(*subID, time.Now())
	if err != nil {
		return err
	}
	deliveryID := newID("dlv")
	client := &http.Client{Timeout: 15 * time.Second}
	for i := 1; i <= *times; i++ {
		status, err := post(ctx, client, *url, deliveryID, body, sec)
		if err != nil {
			return fmt.Errorf("attempt %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "attempt %d of submission %s: %s\n", i, *subID, status)
	}
	return nil
}

func post(ctx context.Context, client *http.Client, url, deliveryID string, body []byte, secrets []string) (string, error) {
	h, err := webhook.SignHeaders(deliveryID, time.Now(), body, secrets...)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	status := resp.Status
	if t := strings.TrimSpace(string(text)); t != "" {
		status += " (" + t + ")"
	}
	return status, nil
}

// sampleEvent is a submission.received body shaped like the server's.
func sampleEvent(subID string, now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{
		"type": webhook.EventSubmissionReceived,
		"submission": map[string]any{
			"id":         subID,
			"form_id":    "form_contact",
			"data":       map[string]string{"name": "Ada Lovelace", "message": "Hello from receiver send"},
			"created_at": now.UTC().Truncate(time.Millisecond),
		},
	})
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail on supported platforms
	return prefix + "_" + hex.EncodeToString(b[:])
}
