package config

import (
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every environment variable Load reads.
const EnvPrefix = "FORMS_"

// kind is a field's type, as far as reading and showing it goes.
type kind int

const (
	kindString kind = iota + 1
	kindSecret
	kindDBURL
	kindBool
	kindInt
	kindInt64
	kindFloat
	kindDuration
	kindSecrets
	kindDurations
	kindPrefixes
	kindStrings
	kindPlugins
)

// kindOf maps a Go type of Config to its kind; a type the loader cannot
// read panics, which TestEveryFieldIsDocumented catches at once.
func kindOf(t reflect.Type) kind {
	switch t {
	case reflect.TypeFor[string]():
		return kindString
	case reflect.TypeFor[Secret]():
		return kindSecret
	case reflect.TypeFor[DatabaseURL]():
		return kindDBURL
	case reflect.TypeFor[bool]():
		return kindBool
	case reflect.TypeFor[int]():
		return kindInt
	case reflect.TypeFor[int64]():
		return kindInt64
	case reflect.TypeFor[float64]():
		return kindFloat
	case reflect.TypeFor[time.Duration]():
		return kindDuration
	case reflect.TypeFor[[]Secret]():
		return kindSecrets
	case reflect.TypeFor[[]time.Duration]():
		return kindDurations
	case reflect.TypeFor[[]netip.Prefix]():
		return kindPrefixes
	case reflect.TypeFor[[]string]():
		return kindStrings
	case reflect.TypeFor[[]PluginConfig]():
		return kindPlugins
	}
	panic(fmt.Sprintf("config: the loader cannot read a field of type %s; teach kindOf about it", t))
}

// field is one key, read from Config's struct tags.
type field struct {
	key     string // "worker.lease_seconds"
	section string // "worker"
	env     string // "FORMS_WORKER_LEASE_SECONDS"
	doc     string
	index   []int
	kind    kind
	// secret values are never shown, not even when they are wrong.
	secret bool
	// fileOnly keys (plugins.list) have no variable and no flag.
	fileOnly bool
}

// section is one top-level key of Config.
type section struct {
	name string
	doc  string
}

// fields lists every key of Config in declaration order. It is computed on
// each call, from the struct tags, so there is no table to keep in step.
func fields() []field {
	var out []field
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sf := ct.Field(i)
		sec := sf.Tag.Get("koanf")
		for j := range sf.Type.NumField() {
			ff := sf.Type.Field(j)
			name := ff.Tag.Get("koanf")
			f := field{
				key:     sec + "." + name,
				section: sec,
				env:     EnvPrefix + strings.ToUpper(sec+"_"+name),
				doc:     ff.Tag.Get("doc"),
				index:   []int{i, j},
				kind:    kindOf(ff.Type),
			}
			f.secret = f.kind == kindSecret || f.kind == kindSecrets || f.kind == kindDBURL
			f.fileOnly = f.kind == kindPlugins
			out = append(out, f)
		}
	}
	return out
}

func sections() []section {
	var out []section
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sf := ct.Field(i)
		out = append(out, section{name: sf.Tag.Get("koanf"), doc: sf.Tag.Get("doc")})
	}
	return out
}

// value is the field inside c.
func (f field) value(c *Config) reflect.Value {
	return reflect.ValueOf(c).Elem().FieldByIndex(f.index)
}

// typeName is what --help calls the field's type.
func (f field) typeName() string {
	switch f.kind {
	case kindString:
		return "string"
	case kindSecret:
		return "secret string"
	case kindDBURL:
		return "URL"
	case kindBool:
		return "bool"
	case kindInt, kindInt64:
		return "integer"
	case kindFloat:
		return "number"
	case kindDuration:
		return "duration"
	case kindSecrets:
		return "list of secret strings"
	case kindDurations:
		return "list of durations"
	case kindPrefixes:
		return "list of CIDRs"
	case kindStrings:
		return "list of strings"
	case kindPlugins:
		return "list of plugins"
	}
	return "value"
}

// show renders the field of c as it may be shown: secrets redacted.
func (f field) show(c Config) string {
	v := f.value(&c)
	switch f.kind {
	case kindSecrets:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = v.Index(i).Interface().(Secret).String()
		}
		return strings.Join(parts, ",")
	case kindPlugins:
		var parts []string
		for _, p := range c.Plugins.List {
			parts = append(parts, fmt.Sprintf("{name=%s path=%s sha256=%s settings=%s}", p.Name, p.Path, p.SHA256, p.Settings))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return formatValue(v)
}

// formatValue renders a non-secret value the way it would be written in
// the environment or a flag. Secret and DatabaseURL go through their own
// String methods.
func formatValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return formatDuration(x)
	case []time.Duration:
		parts := make([]string, len(x))
		for i, d := range x {
			parts[i] = formatDuration(d)
		}
		return strings.Join(parts, ",")
	case []netip.Prefix:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = p.String()
		}
		return strings.Join(parts, ",")
	case []string:
		return strings.Join(x, ",")
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration writes 2m rather than time.Duration's 2m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writeHelp prints every key with its type, default, variable, flag and
// doc, all read from the struct tags and Default.
func writeHelp(w io.Writer, program string) error {
	if program == "" {
		program = "hymical serve"
	}
	def := Default()
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [--config PATH] [--KEY=VALUE ...]\n\n", program)
	b.WriteString(wrap("Every key is read, lowest precedence first, from its default, the YAML config file, "+
		"its FORMS_* environment variable, and its --KEY=VALUE flag. In the environment and in flags a "+
		"list is comma-separated and a duration is written like 500ms, 30s, 2m or 1h. Unknown keys, "+
		"FORMS_* variables and flags are errors.", ""))
	b.WriteString("\n  --config PATH\n")
	b.WriteString(wrap("The YAML config file to read. Optional.", "        "))
	fs := fields()
	for _, sec := range sections() {
		fmt.Fprintf(&b, "\n%s: %s\n", sec.name, sec.doc)
		for _, f := range fs {
			if f.section != sec.name {
				continue
			}
			dv := f.show(def)
			switch {
			case dv == "" && f.kind == kindString:
				dv = `""`
			case dv == "" || dv == "[]":
				dv = "empty"
			}
			fmt.Fprintf(&b, "\n  %s (%s, default %s)\n", f.key, f.typeName(), dv)
			if f.fileOnly {
				b.WriteString("        config file only: no environment variable, no flag\n")
			} else {
				fmt.Fprintf(&b, "        env %s, flag --%s\n", f.env, f.key)
			}
			b.WriteString(wrap(f.doc, "        "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Help is the text --help prints, for docs and READMEs.
func Help(program string) string {
	var b strings.Builder
	_ = writeHelp(&b, program) // a strings.Builder does not fail
	return b.String()
}

// wrap breaks text into lines of at most 78 columns, each indented.
func wrap(text, indent string) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > 78 {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
	return b.String()
}
