package shipped

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every directory under plugins/ with a main.go is a transport hymical
// ships as hymical-plugin-NAME; each must also run built in, or the one
// binary would lack a transport the release used to carry.
func TestNamesAreThePluginsUnderPlugins(t *testing.T) {
	mains, err := filepath.Glob("../*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range mains {
		want = append(want, filepath.Base(filepath.Dir(m)))
	}
	slices.Sort(want)
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want the plugins under plugins/: %q", got, want)
	}
}

func TestServeRefusesANameNotShipped(t *testing.T) {
	tests := []struct{ name string }{{"foo"}, {""}, {"HTTP"}, {"http "}}
	for _, tt := range tests {
		err := Serve(tt.name)
		if !errors.Is(err, ErrUnknown) {
			t.Errorf("Serve(%q) = %v, want ErrUnknown", tt.name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "amqp, http, kafka, mqtt, nats, redis") {
			t.Errorf("Serve(%q) = %q, want it to list the shipped transports", tt.name, msg)
		}
	}
}
