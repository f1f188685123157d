package web

import (
	"fmt"
	"html/template"
)

// pageNames are the template sets: each is layout.html and partials.html
// plus templates/NAME.html, which defines "content" and, for pages with a
// live region, "live".
var pageNames = []string{"fleet", "queue", "jobs", "job", "teams", "nodes", "node", "stacks", "bench", "capacity", "audit", "planner", "login", "switch", "confirm", "error"}

// parseTemplates parses every page set from the embedded files.
func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, fmt.Errorf("web: parse layout: %w", err)
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := base.Clone()
		if err != nil {
			return nil, fmt.Errorf("web: clone layout: %w", err)
		}
		if _, err := t.ParseFS(assets, "templates/"+name+".html"); err != nil {
			return nil, fmt.Errorf("web: parse %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}
