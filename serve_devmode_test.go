package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesDevModeOffLoopback: `hymical serve` in insecure dev mode
// with a listen address other machines can reach stops before it starts
// anything, saying which keys and what to do.
func TestServeRefusesDevModeOffLoopback(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		var out bytes.Buffer
		// Bounded, so a serve that does start returns instead of hanging.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := run(ctx, []string{"serve", "--server.insecure_dev_mode", "--server.listen=" + listen}, &out, &out)
		if err == nil {
			t.Fatalf("serve started in dev mode on %s", listen)
		}
		for _, want := range []string{"server.insecure_dev_mode", "server.listen", "other machines can reach", "127.0.0.1:", "FORMS_SERVER_ADMIN_TOKEN"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("listen %s: error %q does not say %q", listen, err, want)
			}
		}
	}
}
