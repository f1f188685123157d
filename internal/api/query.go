package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// queryParam is one query parameter a route takes, as openapi.json
// declares it.
type queryParam struct {
	// repeated: the parameter is an array (lead_time=A=30d&lead_time=B=60d);
	// any other parameter takes one value.
	repeated bool
}

// routeQueries maps "METHOD PATTERN" to the query parameters the route
// takes. It is read from openapi.json, so the document a client reads and
// the parameters the server accepts are one list.
var routeQueries = mustRouteQueries(openapiJSON)

// mustRouteQueries reads every operation's query parameters from an
// OpenAPI document, resolving references to components/parameters.
func mustRouteQueries(doc []byte) map[string]map[string]queryParam {
	type param struct {
		Ref    string `json:"$ref"`
		Name   string `json:"name"`
		In     string `json:"in"`
		Schema struct {
			Type string `json:"type"`
		} `json:"schema"`
	}
	var d struct {
		Paths      map[string]map[string]struct{ Parameters []param }
		Components struct{ Parameters map[string]param }
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(fmt.Sprintf("openapi.json: %v", err))
	}
	out := map[string]map[string]queryParam{}
	for path, ops := range d.Paths {
		for method, op := range ops {
			ps := map[string]queryParam{}
			for _, p := range op.Parameters {
				if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					ref, found := d.Components.Parameters[name]
					if !found {
						panic(fmt.Sprintf("openapi.json: %s %s: no parameter %s", method, path, p.Ref))
					}
					p = ref
				}
				if p.In == "query" {
					ps[p.Name] = queryParam{repeated: p.Schema.Type == "array"}
				}
			}
			out[strings.ToUpper(method)+" "+path] = ps
		}
	}
	return out
}

// checkQuery refuses a query string the route does not take: a parameter
// it does not declare, or a single-valued one given more than once. Like
// unknown body fields, these are errors naming the parameter, never
// ignored: a typo (?quantlie=0.9) or a misplaced option would otherwise
// answer as if it had not been sent.
func checkQuery(declared map[string]queryParam, q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		p, ok := declared[name]
		if !ok {
			takes := "none"
			if len(declared) > 0 {
				takes = strings.Join(slices.Sorted(maps.Keys(declared)), ", ")
			}
			return fmt.Errorf("%w: unknown query parameter %s (this route takes: %s)", gpufleet.ErrInvalid, gpufleet.Quote(name), takes)
		}
		if n := len(q[name]); n > 1 && !p.repeated {
			return fmt.Errorf("%w: query parameter %s given %d times: it takes one value", gpufleet.ErrInvalid, gpufleet.Quote(name), n)
		}
	}
	return nil
}

// checkQuery refuses a request whose query string the route does not
// take (see checkQuery), or that does not parse.
func (h *handler) checkQuery(rt routeDef, r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fmt.Errorf("%w: query string: %v", gpufleet.ErrInvalid, err)
	}
	return checkQuery(routeQueries[rt.Method+" "+rt.Pattern], q)
}
