package api

import (
	"context"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// QueueList is a page of GET /api/v1/queue.
type QueueList struct {
	Queue     []gpufleet.QueueEntry `json:"queue"`
	NextToken string                `json:"next_token"`
}

// NodeList is a page of GET /api/v1/nodes.
type NodeList struct {
	Nodes     []gpufleet.Node `json:"nodes"`
	NextToken string          `json:"next_token"`
}

// TeamList is a page of GET /api/v1/teams.
type TeamList struct {
	Teams     []gpufleet.Team `json:"teams"`
	NextToken string          `json:"next_token"`
}

// ClassList is a page of GET /api/v1/classes.
type ClassList struct {
	Classes   []gpufleet.Class `json:"classes"`
	NextToken string           `json:"next_token"`
}

// PutRackRequest is the body of PUT /api/v1/racks/{name}: the rack, and
// Force to make a change that moves nodes from another rack or leaves the
// rack's projected draw over its budget (refused without it, 422
// unsatisfiable, docs/POWER.md#racks).
type PutRackRequest struct {
	gpufleet.Rack
	Force bool `json:"force,omitempty"`
}

// CreateStackRequest is the body of POST /api/v1/stacks: the stack, and
// Force to record one the compatibility rules say works on none of the
// fleet's GPU models (refused without it, 422 unsatisfiable).
type CreateStackRequest struct {
	gpufleet.Stack
	Force bool `json:"force,omitempty"`
}

// RackList is a page of racks.
type RackList struct {
	Racks     []gpufleet.Rack `json:"racks"`
	NextToken string          `json:"next_token"`
}

// StackList is a page of GET /api/v1/stacks.
type StackList struct {
	Stacks    []gpufleet.Stack `json:"stacks"`
	NextToken string           `json:"next_token"`
}

// StackValidateRequest is the body of POST /api/v1/stacks/{name}/validate:
// the GPU model whose nodes' evidence validates the stack.
type StackValidateRequest struct {
	GPUModel string `json:"gpu_model"`
	// BakeS is how long each node must have run the stack and stayed
	// healthy; null means DefaultStackBake.
	BakeS *float64 `json:"bake_s"`
}

// DefaultStackBake is a validation's bake time when none is given.
const DefaultStackBake = 30 * time.Minute

// NodeStack is one node's stack as the rules judge it (GET
// /api/v1/stacks/check): its versions, the GPU models it holds, the named
// stacks it runs, and the rules' findings (docs/STACKS.md).
type NodeStack struct {
	Node      string                 `json:"node"`
	GPUModels []string               `json:"gpu_models"`
	Versions  gpufleet.StackVersions `json:"versions"`
	Stacks    []string               `json:"stacks"`
	Findings  []stack.Finding        `json:"findings"`
}

// NodeStackList is a page of GET /api/v1/stacks/check.
type NodeStackList struct {
	Nodes     []NodeStack `json:"nodes"`
	NextToken string      `json:"next_token"`
}

// RolloutRequest is the body of POST /api/v1/rollouts: the stack, the
// nodes (a GPU model and labels), the canary and waves, how many nodes may
// be out at once, the bake and update timeout, and the operator's update
// command (docs/STACKS.md#rollouts).
type RolloutRequest struct {
	Stack          string            `json:"stack"`
	GPUModel       string            `json:"gpu_model,omitempty"`
	Selector       map[string]string `json:"selector,omitempty"`
	Canary         int               `json:"canary"`
	Waves          []float64         `json:"waves,omitempty"`
	MaxUnavailable int               `json:"max_unavailable,omitempty"`
	BakeS          *float64          `json:"bake_s,omitempty"`
	UpdateTimeoutS *float64          `json:"update_timeout_s,omitempty"`
	UpdateCommand  string            `json:"update_command,omitempty"`
	// MaxUnavailablePercent is max_unavailable as a share of the selected
	// nodes (rounded up); give one of the two.
	MaxUnavailablePercent float64 `json:"max_unavailable_percent,omitempty"`
	// DrainPolicy is wait, timeout:DURATION or now (default timeout:1h);
	// OnHalt pause or rollback (default pause).
	DrainPolicy string `json:"drain_policy,omitempty"`
	OnHalt      string `json:"on_halt,omitempty"`
	// Force starts a rollout the pre-flight check refuses, with its
	// findings kept as the rollout's warnings.
	Force bool `json:"force,omitempty"`
}

// Validate checks a rollout request's fields, naming the first bad one.
func (r RolloutRequest) Validate() error {
	if err := gpufleet.ValidateName("stack", r.Stack); err != nil {
		return err
	}
	if err := gpufleet.ValidateCount("canary", r.Canary, 0, gpufleet.MaxFleetNodes); err != nil {
		return err
	}
	if err := gpufleet.ValidateCount("max_unavailable", r.MaxUnavailable, 0, gpufleet.MaxFleetNodes); err != nil {
		return err
	}
	if r.MaxUnavailablePercent != 0 {
		if !(r.MaxUnavailablePercent > 0 && r.MaxUnavailablePercent <= 100) {
			return fmt.Errorf("%w: max_unavailable_percent %g: expected above 0 up to 100", gpufleet.ErrInvalid, r.MaxUnavailablePercent)
		}
		if r.MaxUnavailable != 0 {
			return fmt.Errorf("%w: max_unavailable and max_unavailable_percent: give one", gpufleet.ErrInvalid)
		}
	}
	if r.DrainPolicy != "" {
		if _, err := rollout.ParseDrainPolicy(r.DrainPolicy); err != nil {
			return err
		}
	}
	if r.OnHalt != "" {
		if _, err := rollout.ParseOnHalt(r.OnHalt); err != nil {
			return err
		}
	}
	if len(r.Waves) > 100 {
		return fmt.Errorf("%w: waves: %d, at most 100", gpufleet.ErrInvalid, len(r.Waves))
	}
	for name, v := range map[string]*float64{"bake_s": r.BakeS, "update_timeout_s": r.UpdateTimeoutS} {
		if v != nil && !(*v >= 0 && *v <= 30*86400) {
			return fmt.Errorf("%w: %s %g: expected 0 to 30 days in seconds", gpufleet.ErrInvalid, name, *v)
		}
	}
	if len(r.Selector) > gpufleet.MaxListLen {
		return fmt.Errorf("%w: selector: %d labels, at most %d", gpufleet.ErrInvalid, len(r.Selector), gpufleet.MaxListLen)
	}
	for k, v := range r.Selector {
		if err := gpufleet.CheckText("selector key", k, gpufleet.MaxWordLen, false); err != nil {
			return err
		}
		if err := gpufleet.CheckText("selector."+k, v, gpufleet.MaxWordLen, false); err != nil {
			return err
		}
	}
	if err := gpufleet.CheckText("gpu_model", r.GPUModel, gpufleet.MaxWordLen, false); err != nil {
		return err
	}
	return gpufleet.CheckText("update_command", r.UpdateCommand, 4096, false)
}

// RolloutList is a page of GET /api/v1/rollouts.
type RolloutList struct {
	Rollouts  []rollout.Rollout `json:"rollouts"`
	NextToken string            `json:"next_token"`
}

// TokenList is a page of GET /api/v1/tokens. Secrets are never listed.
type TokenList struct {
	Tokens    []gpufleet.Token `json:"tokens"`
	NextToken string           `json:"next_token"`
}

// EventList is a page of GET /api/v1/events.
type EventList struct {
	Events []gpufleet.Event `json:"events"`
	// NextToken is the id to pass as since for the next page; empty when
	// this page is the last.
	NextToken string `json:"next_token"`
}

// EventQuery selects stored events: those with an id above Since, oldest
// first, at most Limit (0: the service's default).
type EventQuery struct {
	Since int64
	Limit int
}

// EventLister lists stored events. A WatchService that also implements it
// serves GET /api/v1/events without ?watch=1; otherwise that request is a
// 422 and only the stream is offered.
type EventLister interface {
	Events(ctx context.Context, p Principal, q EventQuery) (EventList, error)
}

// AuthKind is what credential a route takes.
type AuthKind string

// Auth kinds of the routes.
const (
	// AuthNone routes take no credential (health, readiness, the API document).
	AuthNone AuthKind = "none"
	// AuthMember routes take any user token; members see their own team's
	// objects only.
	AuthMember AuthKind = "member"
	// AuthAdmin routes take an admin token; members get 403.
	AuthAdmin AuthKind = "admin"
	// AuthMonitor routes (metrics, service discovery) take an admin or a
	// monitor token, the only routes a monitor token opens.
	AuthMonitor AuthKind = "monitor"
	// AuthJoin is agent registration: the bearer is a join token.
	AuthJoin AuthKind = "join"
	// AuthAgent routes take a node credential issued at registration.
	AuthAgent AuthKind = "agent"
)

// Route is one entry of the API's route table.
type Route struct {
	Method  string   // GET, POST, DELETE
	Pattern string   // net/http pattern path, e.g. /api/v1/jobs/{id}
	Auth    AuthKind // what credential it takes
	Summary string   // one line, as in openapi.json
}
