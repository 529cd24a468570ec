package config

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
)

// decodeField reads f's value from k into cfg. Values arrive as YAML gave
// them (int, float64, bool, string, []any, maps) or as the text of a
// variable or flag; both are accepted wherever they mean the same thing.
// A value that is absent or null leaves the default.
func decodeField(k *koanf.Koanf, f field, cfg *Config, r *report, src map[string]string) {
	raw := k.Get(f.key)
	if raw == nil || r.bad[f.key] {
		return
	}
	where := ""
	if s := src[f.key]; s != "" {
		where = " (set " + s + ")"
	}
	if f.kind == kindPlugins {
		if ps, ok := decodePlugins(raw, f.key+where, r); ok {
			cfg.Plugins.List = ps
		}
		return
	}
	var v any
	var problem string
	switch f.kind {
	case kindSecrets, kindDurations, kindPrefixes, kindStrings:
		v, problem = decodeList(f, raw)
	default:
		v, problem = decodeScalar(f.kind, raw)
	}
	if problem != "" {
		r.invalid(f.key, "%s%s %s", f.key, where, problem)
		return
	}
	f.value(cfg).Set(reflect.ValueOf(v))
}

// describe names what kind of YAML value raw is, without showing it.
func describe(raw any) string {
	switch raw.(type) {
	case string:
		return "text"
	case bool:
		return "true or false"
	case int, int64, uint64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a map"
	}
	return fmt.Sprintf("a YAML %T", raw)
}

// decodeScalar reads one value of kind k. The problem it returns follows
// the key in a message ("is not a whole number: ..."); it shows the value
// only for kinds that cannot be secret.
func decodeScalar(k kind, raw any) (any, string) {
	switch k {
	case kindString:
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Sprintf("must be text, not %s: put it in quotes", describe(raw))
		}
		return s, ""
	case kindSecret, kindDBURL:
		s, ok := raw.(string)
		if !ok {
			return nil, fmt.Sprintf("must be text, not %s: put it in quotes (the value is not shown because it is secret)", describe(raw))
		}
		if k == kindSecret {
			return Secret(s), ""
		}
		return DatabaseURL(s), ""
	case kindBool:
		switch x := raw.(type) {
		case bool:
			return x, ""
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(x))
			if err != nil {
				return nil, fmt.Sprintf("is %s, not true or false: write true or false", quote(x))
			}
			return b, ""
		}
		return nil, fmt.Sprintf("must be true or false, not %s", describe(raw))
	case kindInt, kindInt64:
		n, problem := decodeInt(raw)
		if problem != "" {
			return nil, problem
		}
		if k == kindInt {
			if n < math.MinInt || n > math.MaxInt {
				return nil, "is too large: write a smaller whole number"
			}
			return int(n), ""
		}
		return n, ""
	case kindFloat:
		var x float64
		switch v := raw.(type) {
		case float64:
			x = v
		case int:
			x = float64(v)
		case int64:
			x = float64(v)
		case uint64:
			x = float64(v)
		case string:
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Sprintf("is %s, not a number: write a number such as 0.2", quote(v))
			}
			x = f
		default:
			return nil, fmt.Sprintf("must be a number such as 0.2, not %s", describe(raw))
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, "is not a finite number: write a number such as 0.2"
		}
		return x, ""
	case kindDuration:
		return decodeDuration(raw)
	}
	return nil, "cannot be read" // kindOf refuses any other kind at startup
}

func decodeInt(raw any) (int64, string) {
	const hint = ": write a whole number such as 60"
	switch x := raw.(type) {
	case int:
		return int64(x), ""
	case int64:
		return x, ""
	case uint64:
		if x > math.MaxInt64 {
			return 0, "is too large" + hint
		}
		return int64(x), ""
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.Abs(x) >= math.MaxInt64 {
			return 0, fmt.Sprintf("is %s, not a whole number%s", strconv.FormatFloat(x, 'g', -1, 64), hint)
		}
		return int64(x), ""
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Sprintf("is %s, not a whole number%s", quote(x), hint)
		}
		return n, ""
	}
	return 0, fmt.Sprintf("must be a whole number, not %s%s", describe(raw), hint)
}

func decodeDuration(raw any) (any, string) {
	const hint = ": write a number and a unit, such as 500ms, 30s, 2m or 1h"
	switch x := raw.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return nil, fmt.Sprintf("is %s, not a duration%s", quote(x), hint)
		}
		return d, ""
	case int, int64, uint64, float64:
		if fmt.Sprint(x) == "0" {
			return time.Duration(0), ""
		}
		return nil, fmt.Sprintf("is %v with no unit%s", x, hint)
	}
	return nil, fmt.Sprintf("must be a duration, not %s%s", describe(raw), hint)
}

// decodeList reads a list kind from a YAML list, or from comma-separated
// text (the environment and flags; empty items are dropped, so a trailing
// comma is harmless and an empty variable means an empty list).
func decodeList(f field, raw any) (any, string) {
	var items []any
	switch x := raw.(type) {
	case []any:
		items = x
	case string:
		for _, part := range strings.Split(x, ",") {
			if part = strings.TrimSpace(part); part != "" {
				items = append(items, part)
			}
		}
	default:
		return nil, fmt.Sprintf("must be a list, not %s: write a YAML list, or comma-separated text", describe(raw))
	}
	switch f.kind {
	case kindSecrets:
		out := make([]Secret, 0, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return nil, fmt.Sprintf("item %d must be text, not %s: put it in quotes (the value is not shown because it is secret)", i+1, describe(it))
			}
			out = append(out, Secret(s))
		}
		return out, ""
	case kindDurations:
		out := make([]time.Duration, 0, len(items))
		for i, it := range items {
			d, problem := decodeDuration(it)
			if problem != "" {
				return nil, fmt.Sprintf("item %d %s", i+1, problem)
			}
			out = append(out, d.(time.Duration))
		}
		return out, ""
	case kindPrefixes:
		out := make([]netip.Prefix, 0, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return nil, fmt.Sprintf("item %d must be a CIDR such as 10.0.0.0/8, not %s", i+1, describe(it))
			}
			p, ok := parseNetwork(s)
			if !ok {
				return nil, fmt.Sprintf("item %d is %s, which is not a CIDR such as 10.0.0.0/8 or fd00::/8, nor a single address: fix or remove it", i+1, quote(s))
			}
			out = append(out, p)
		}
		return out, ""
	case kindStrings:
		out := make([]string, 0, len(items))
		for i, it := range items {
			s, ok := it.(string)
			if !ok {
				return nil, fmt.Sprintf("item %d must be text, not %s: put it in quotes", i+1, describe(it))
			}
			out = append(out, s)
		}
		return out, ""
	}
	return nil, "cannot be read"
}

// parseNetwork reads a CIDR, or a single address as the network of just
// it, the way the http plugin does.
func parseNetwork(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// asMap returns a YAML map with string keys, whichever map type the parser
// produced.
func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// decodePlugins reads plugins.list. Each problem is reported under the
// entry's own key, plugins.list[N].KEY; no settings value is ever shown.
func decodePlugins(raw any, key string, r *report) ([]PluginConfig, bool) {
	items, ok := raw.([]any)
	if !ok {
		r.invalid("plugins.list", "%s must be a list of plugin entries, each starting with \"- name: NAME\", not %s", key, describe(raw))
		return nil, false
	}
	before := len(r.problems)
	out := make([]PluginConfig, 0, len(items))
	for i, it := range items {
		ekey := fmt.Sprintf("plugins.list[%d]", i)
		m, ok := asMap(it)
		if !ok {
			r.invalid(ekey, "%s must be a map with name, path, sha256 and settings, not %s", ekey, describe(it))
			continue
		}
		var p PluginConfig
		for _, name := range slices.Sorted(maps.Keys(m)) {
			v := m[name]
			k := ekey + "." + showKey(name)
			switch name {
			case "name", "path", "sha256":
				s, ok := v.(string)
				if v != nil && !ok {
					r.invalid(k, "%s must be text, not %s: put it in quotes", k, describe(v))
					continue
				}
				switch name {
				case "name":
					p.Name = s
				case "path":
					p.Path = s
				case "sha256":
					p.SHA256 = s
				}
			case "settings":
				p.Settings = decodeSettings(v, k, r)
			default:
				r.unknown(k, "%s is not a key of a plugin entry%s: an entry has name, path, sha256 and settings", k,
					suggest(name, []string{"name", "path", "sha256", "settings"}))
			}
		}
		out = append(out, p)
	}
	return out, len(r.problems) == before
}

// decodeSettings reads a plugin's settings: a map of names to single
// values, which the plugin gets as text.
func decodeSettings(v any, key string, r *report) Settings {
	if v == nil {
		return nil
	}
	m, ok := asMap(v)
	if !ok {
		r.invalid(key, "%s must be a map of setting names to values, not %s", key, describe(v))
		return nil
	}
	out := make(Settings, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		sk := key + "." + showKey(name)
		if strings.TrimSpace(name) == "" {
			r.invalid(key, "%s has a setting with an empty name: name it or remove it", key)
			continue
		}
		switch x := m[name].(type) {
		case nil:
			out[name] = ""
		case string:
			out[name] = x
		case bool:
			out[name] = strconv.FormatBool(x)
		case int:
			out[name] = strconv.Itoa(x)
		case int64:
			out[name] = strconv.FormatInt(x, 10)
		case uint64:
			out[name] = strconv.FormatUint(x, 10)
		case float64:
			out[name] = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			r.invalid(sk, "%s must be a single value, not %s (settings values are never shown, in case they are secret)", sk, describe(m[name]))
		}
	}
	return out
}
