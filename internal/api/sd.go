package api

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"

	"github.com/gpufleet/gpufleet"
)

// SDTarget is one group of Prometheus HTTP service discovery (and
// file_sd): the targets and their labels.
type SDTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// SDService lists the agents' metrics endpoints for Prometheus.
type SDService interface {
	ScrapeTargets(ctx context.Context, p Principal) ([]SDTarget, error)
}

var labelNameRe = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// promLabel turns a node label's name into a Prometheus label name.
func promLabel(s string) string {
	s = labelNameRe.ReplaceAllString(s, "_")
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "_" + s
	}
	return s
}

// NodeTargets is the Prometheus service discovery of the nodes' agents:
// one group per node that said where its metrics are, with the node's
// name as the plain label node, and its state, health, GPU model and
// labels as __meta_gpufleet_* labels for relabelling. Nodes whose agent
// serves no metrics are left out.
func NodeTargets(nodes []gpufleet.Node) []SDTarget {
	out := []SDTarget{}
	for _, n := range nodes {
		u, err := url.Parse(n.MetricsURL)
		if n.MetricsURL == "" || err != nil || u.Host == "" {
			continue
		}
		l := map[string]string{
			"node":                  n.Name,
			"__scheme__":            u.Scheme,
			"__metrics_path__":      u.Path,
			"__meta_gpufleet_node":  n.Name,
			"__meta_gpufleet_state": string(n.State),
		}
		if l["__metrics_path__"] == "" {
			l["__metrics_path__"] = "/metrics"
		}
		if n.Health != "" {
			l["__meta_gpufleet_health"] = string(n.Health)
		}
		if len(n.GPUs) > 0 {
			l["__meta_gpufleet_gpu_model"] = n.GPUs[0].Model
		}
		for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
			l["__meta_gpufleet_label_"+promLabel(k)] = n.Labels[k]
		}
		out = append(out, SDTarget{Targets: []string{u.Host}, Labels: l})
	}
	return out
}

func (h *handler) scrapeTargets(w http.ResponseWriter, r *http.Request, p Principal) error {
	sd, ok := h.svc.(SDService)
	if !ok {
		return fmt.Errorf("%w: this server offers no service discovery", gpufleet.ErrUnsupported)
	}
	out, err := sd.ScrapeTargets(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// ScrapeTargets reads the agents' scrape targets (admin).
func (c *Client) ScrapeTargets(ctx context.Context) ([]SDTarget, error) {
	var out []SDTarget
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sd/agents", idempotent: true}, &out)
	return out, err
}
