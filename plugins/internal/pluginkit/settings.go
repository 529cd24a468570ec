package pluginkit

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hymical/hymical/sdk/transport"
)

// ClipBytes is how much of a value Clip keeps.
const ClipBytes = 64

// Clip keeps a value quoted in an error short: at most ClipBytes bytes,
// cut on a rune boundary and marked with "…".
func Clip(s string) string {
	if len(s) <= ClipBytes {
		return s
	}
	cut := ClipBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ParseDuration reads the value of setting key, which must be a positive
// Go duration; white space around it is ignored. The error names the
// setting and quotes the value as given.
func ParseDuration(key, value string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(value))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("setting %s: %q is not a positive Go duration such as \"5s\" or \"500ms\"", key, value)
	}
	return d, nil
}

// ParseURL is url.Parse with an error that does not quote the URL: url's
// own error quotes it whole, password included, so only what is wrong
// with it is kept. The caller says which URL and gives an example.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, err
	}
	return u, nil
}

// CertPool reads the PEM file path named by setting key into a pool of
// trusted certificates. The error names the setting.
func CertPool(key, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("setting %s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("setting %s: %s holds no PEM certificate", key, path)
	}
	return pool, nil
}

// UnknownKey returns the first key of config, in sorted order (so the
// error is the same every time), that is not among allowed.
func UnknownKey(config map[string]string, allowed ...string) (string, bool) {
	for _, key := range slices.Sorted(maps.Keys(config)) {
		if !slices.Contains(allowed, key) {
			return key, true
		}
	}
	return "", false
}

// EndpointURL is the broker URL an endpoint names, in its config under key
// or as its URL, trimmed; "" when it names none. Naming two different ones
// is an error; noun says what the URL points at ("broker", "server").
func EndpointURL(e transport.Endpoint, key, noun string) (string, error) {
	raw := strings.TrimSpace(e.Config[key])
	if e.URL == "" {
		return raw, nil
	}
	if raw != "" && raw != strings.TrimSpace(e.URL) {
		return "", fmt.Errorf("the endpoint has both a URL and a different %s in its config; give the %s once", key, noun)
	}
	return strings.TrimSpace(e.URL), nil
}
