package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// checkMonitoringConfigs holds the shipped alerting rules and Grafana
// dashboard to the metrics a real server exports, given its /metrics after
// it has sent (TestServeTracesAndMetrics): a name misspelt, or a metric
// renamed in the server, fails here rather than as an alert that can never
// fire or a panel that stays empty. promtool, in .ci/run, checks the
// rules' syntax and behaviour; it cannot know the names.
func checkMonitoringConfigs(t *testing.T, metrics string) {
	t.Helper()
	exported := exportedNames(metrics)
	for _, tc := range []struct {
		file  string
		exprs []string
	}{
		{"configs/prometheus/hymical-alerts.yml", ruleExprs(t, "configs/prometheus/hymical-alerts.yml")},
		{"configs/grafana/hymical.json", dashboardExprs(t, "configs/grafana/hymical.json")},
	} {
		names := metricNames(tc.exprs)
		if len(names) == 0 {
			t.Errorf("%s: no hymical_ metric found in %d expressions; is the file read right?", tc.file, len(tc.exprs))
		}
		for _, name := range names {
			if !exported[name] {
				t.Errorf("%s uses %s, which a running server does not export; fix the name (server/telemetry/names.go lists them)", tc.file, name)
			}
		}
	}
}

// exportedNames reads the series names of a Prometheus text exposition,
// with the _bucket, _sum and _count series of every histogram, which have
// no sample until their first observation.
func exportedNames(body string) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				out[f[0]] = true
				if f[1] == "histogram" {
					for _, s := range []string{"_bucket", "_sum", "_count"} {
						out[f[0]+s] = true
					}
				}
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out
}

var metricName = regexp.MustCompile(`\bhymical_[a-z0-9_]+`)

// metricNames lists the hymical_ metrics the expressions name, sorted.
func metricNames(exprs []string) []string {
	var out []string
	for _, e := range exprs {
		out = append(out, metricName.FindAllString(e, -1)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ruleExprs reads every rule's expression from a Prometheus rule file.
func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" {
				t.Errorf("%s: rule %q has no expr", path, r.Alert)
			}
			out = append(out, r.Expr)
		}
	}
	return out
}

// dashboardExprs reads every query of a Grafana dashboard: the "expr" of
// each panel's targets and the "query" of its variables, wherever they nest.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", path, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}
