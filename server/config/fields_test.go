package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestEveryFieldIsDocumented walks every struct in Config: each field
// needs a koanf key and a doc tag, since --help and the key names are
// generated from them.
func TestEveryFieldIsDocumented(t *testing.T) {
	t.Parallel()
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := f.Tag.Get("koanf")
			if key == "" || strings.ToLower(key) != key || strings.ContainsAny(key, ". ") {
				t.Errorf("%s.%s: koanf tag %q, want a lower-case name without dots", path, f.Name, key)
			}
			if strings.TrimSpace(f.Tag.Get("doc")) == "" {
				t.Errorf("%s.%s has no doc tag", path, f.Name)
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() {
				walk(path+"."+key, ft)
			}
		}
	}
	walk("config", reflect.TypeFor[Config]())

	envs := map[string]bool{}
	for _, f := range fields() { // panics on a type the loader cannot read
		if envs[f.env] {
			t.Errorf("two keys share the variable %s", f.env)
		}
		envs[f.env] = true
		if !strings.Contains(strings.Join(strings.Fields(Help("")), " "), f.doc) {
			t.Errorf("--help lacks the doc of %s", f.key)
		}
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	keys := []string{"worker.lease_seconds", "worker.concurrency", "log.level"}
	tests := map[string]string{
		"worker.lease_second": " (did you mean worker.lease_seconds?)",
		"worker.concurency":   " (did you mean worker.concurrency?)",
		"LOG.LEVEL":           " (did you mean log.level?)",
		"database.url":        "",
		"x":                   "",
	}
	for in, want := range tests {
		if got := suggest(in, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
