package console

import (
	"fmt"
	"html/template"
	"time"
)

// parsePages parses every page with the layout into its own template set,
// so each page's "content" block cannot clash with another's.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ts":  formatTime,
		"tsp": formatTimePtr,
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"dur": formatDuration,
	}
	pages := []string{"login", "overview", "deliveries", "delivery", "endpoints", "endpoint_delete", "rotated", "error", "endpoint_form"}
	out := make(map[string]*template.Template, len(pages))
	for _, name := range pages {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse the %s page: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// formatTime shows times in UTC to the second: the server's records are
// in UTC, and one zone on every page keeps them comparable.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return formatTime(*t)
}

func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "—"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return d.Round(10 * time.Millisecond).String()
}
