// Package rollout moves nodes to a new software stack in waves, gated by
// validation and health, and halts on the first failure (docs/STACKS.md).
// It is pure: Step takes the rollout's state and what the fleet looks like
// now, and returns the new state and the actions the leader applies. The
// state is all there is to resume from, so a leader that crashed mid-wave
// resumes where the store says it was: actions are idempotent (setting a
// node's state), and an update is ordered from the state, never twice
// (agents keep which updates they ran).
package rollout

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// State is a rollout's state.
type State string

// Rollout states.
const (
	Running     State = "running"
	Paused      State = "paused"
	Halted      State = "halted" // a gate failed; the failed nodes stay out of service
	Done        State = "done"
	Aborted     State = "aborted"
	RollingBack State = "rolling_back"
	RolledBack  State = "rolled_back"
)

// Phase is where one node is in the rollout.
type Phase string

// Node phases, in order.
const (
	Pending Phase = "pending"
	// WaitingForJobs: cordoned (no new work), its running work left to
	// finish on its own, by the drain policy wait or timeout.
	WaitingForJobs Phase = "waiting_for_jobs"
	Draining       Phase = "draining"   // cordoned, running work stopping
	Updating       Phase = "updating"   // the agent runs the update
	Validating     Phase = "validating" // on the new stack: the return-to-service check runs
	Baking         Phase = "baking"     // validated, back in service; health watched
	Complete       Phase = "complete"   // baked
	Failed         Phase = "failed"     // a gate failed; kept out of service
)

// Node is one node of a rollout.
type Node struct {
	Name  string    `json:"name"`
	Wave  int       `json:"wave"` // 0 is the canary
	Phase Phase     `json:"phase"`
	Since time.Time `json:"since"` // when the phase began
	// Previous are the node's versions before the update, for rollback.
	Previous map[string]string `json:"previous"`
	Reason   string            `json:"reason"`
	// Waiting says why the node, due in its wave, has not started (the
	// production spare would be gone); "" otherwise.
	Waiting string `json:"waiting,omitempty"`
	// Updates counts the update orders given to the node: an order is
	// (rollout, node, count), and an agent runs each once.
	Updates int `json:"updates"`
}

// Rollout is a stack rollout's whole state.
type Rollout struct {
	ID     string            `json:"id"`
	Stack  string            `json:"stack"`
	Target map[string]string `json:"target"` // the stack's versions
	// Selection: the nodes with a GPU of GPUModel (when set) carrying every
	// Selector label.
	GPUModel string            `json:"gpu_model"`
	Selector map[string]string `json:"selector"`
	// Canary nodes go first, alone; Waves are then the cumulative shares
	// of the rest (0.1, 0.5, 1).
	Canary int       `json:"canary"`
	Waves  []float64 `json:"waves"`
	// MaxUnavailable is how many nodes may be out of service at once;
	// MaxUnavailablePercent, when set, is the share of the selection it
	// was resolved from (rounded up, at least 1).
	MaxUnavailable        int     `json:"max_unavailable"`
	MaxUnavailablePercent float64 `json:"max_unavailable_percent,omitempty"`
	// DrainPolicy is what a node's running work gets before its update;
	// OnHalt what a failed gate does.
	DrainPolicy DrainPolicy `json:"drain_policy"`
	OnHalt      OnHalt      `json:"on_halt"`
	// Halt is why the rollout halted, kept through its rollback.
	Halt string `json:"halt,omitempty"`
	// Warnings are what the pre-flight check found incompatible when the
	// rollout was started anyway (forced).
	Warnings []string `json:"warnings,omitempty"`
	// BakeS is how long each updated node must stay healthy on the stack
	// before it returns to service; UpdateTimeoutS how long it may take
	// to come back on the target versions after its update was ordered.
	BakeS          float64   `json:"bake_s"`
	UpdateTimeoutS float64   `json:"update_timeout_s"`
	UpdateCommand  string    `json:"update_command"`
	State          State     `json:"state"`
	Reason         string    `json:"reason"`
	Wave           int       `json:"wave"` // the wave in progress
	Nodes          []Node    `json:"nodes"`
	CreatedBy      string    `json:"created_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func (r *Rollout) bake() time.Duration          { return seconds(r.BakeS) }
func (r *Rollout) updateTimeout() time.Duration { return seconds(r.UpdateTimeoutS) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Defaults.
const (
	DefaultBake          = 30 * time.Minute
	DefaultUpdateTimeout = 30 * time.Minute
)

// Plan assigns the selected nodes (sorted by name) to waves: the first
// canary nodes to wave 0, then the rest by the cumulative shares.
func Plan(r *Rollout, nodes []string) error {
	if len(nodes) == 0 {
		return fmt.Errorf("%w: rollout: no node matches the selection", gpufleet.ErrInvalid)
	}
	if r.Canary < 0 || r.Canary > len(nodes) {
		return fmt.Errorf("%w: canary %d: expected 0 to the %d selected nodes", gpufleet.ErrInvalid, r.Canary, len(nodes))
	}
	if len(r.Waves) == 0 {
		r.Waves = []float64{1}
	}
	prev := 0.0
	for i, w := range r.Waves {
		if !(w > prev && w <= 1) {
			return fmt.Errorf("%w: waves: %v: expected rising shares up to 1", gpufleet.ErrInvalid, r.Waves)
		}
		prev = w
		if i == len(r.Waves)-1 && w != 1 {
			return fmt.Errorf("%w: waves: the last must be 1 (every node)", gpufleet.ErrInvalid)
		}
	}
	if r.MaxUnavailablePercent > 0 {
		r.MaxUnavailable = unavailableOf(r.MaxUnavailablePercent, len(nodes))
	}
	if r.MaxUnavailable <= 0 {
		r.MaxUnavailable = 1
	}
	if r.DrainPolicy.Mode == "" {
		r.DrainPolicy = DefaultDrainPolicy
	}
	if r.OnHalt == "" {
		r.OnHalt = HaltPause
	}
	if !(r.BakeS > 0) {
		r.BakeS = DefaultBake.Seconds()
	}
	if !(r.UpdateTimeoutS > 0) {
		r.UpdateTimeoutS = DefaultUpdateTimeout.Seconds()
	}
	nodes = slices.Sorted(slices.Values(nodes))
	rest := len(nodes) - r.Canary
	r.Nodes = r.Nodes[:0]
	for i, n := range nodes {
		wave := 0
		if i >= r.Canary {
			k := i - r.Canary // among the rest
			for w, share := range r.Waves {
				if k < int(math.Ceil(share*float64(rest))) {
					wave = w + 1
					break
				}
			}
		}
		r.Nodes = append(r.Nodes, Node{Name: n, Wave: wave, Phase: Pending})
	}
	if r.Canary == 0 {
		r.Wave = 1
	}
	r.State = Running
	return nil
}

// View is one node as the fleet shows it now.
type View struct {
	State    gpufleet.NodeState
	Health   gpufleet.Health
	Reason   string            // the health or state reason
	Versions map[string]string // as the agent reported them
	Running  int               // attempts on the node
	// Incompatible is the first finding of the compatibility rules that
	// says the node's stack cannot work, or "".
	Incompatible string
	Seen         bool // the agent heartbeats
	// Production says production work runs there: such nodes of a wave
	// go last. SpareShort, when set, says why taking the node out now
	// would leave less than the production class's spare: it waits.
	Production bool
	SpareShort string
}

// Action is what the leader does for a step.
type Action struct {
	Kind   ActionKind
	Node   string
	Reason string
}

// ActionKind is an action's kind.
type ActionKind string

// Actions. Each is idempotent: it sets a node's state.
const (
	Drain    ActionKind = "drain"    // stop new work and stop the running work
	Cordon   ActionKind = "cordon"   // keep out of service (a failed node)
	Validate ActionKind = "validate" // run the return-to-service check (ready when it passes)
)

// Step advances a rollout by what the fleet shows at now. Nodes missing
// from views count as gone (their step fails). A paused rollout carries
// its nodes in flight through their steps and starts no other.
func Step(r Rollout, views map[string]View, now time.Time) (Rollout, []Action) {
	r.Nodes = slices.Clone(r.Nodes)
	var acts []Action
	if !r.moving() {
		return r, nil
	}
	target := r.Target
	for i := range r.Nodes {
		n := &r.Nodes[i]
		v, ok := views[n.Name]
		if r.State == RollingBack {
			target = n.Previous
		}
		switch n.Phase {
		case WaitingForJobs:
			switch {
			case !ok:
				fail(n, now, "the node left the fleet")
			case v.Running == 0:
				n.Phase, n.Since, n.Updates, n.Waiting = Updating, now, n.Updates+1, ""
			case r.DrainPolicy.Mode == DrainTimeout && now.Sub(n.Since) >= r.DrainPolicy.Timeout:
				n.Phase, n.Since, n.Waiting = Draining, now, ""
				acts = append(acts, Action{Kind: Drain, Node: n.Name, Reason: fmt.Sprintf("rollout %s: %s still ran after %s: stopping them with their grace, %s",
					r.ID, attempts(v.Running), gpufleet.FormatDuration(r.DrainPolicy.Timeout), r.direction(*n))})
			default:
				n.Waiting = fmt.Sprintf("for its %s to end (%s)", attempts(v.Running), r.DrainPolicy)
			}
		case Draining:
			switch {
			case !ok:
				fail(n, now, "the node left the fleet")
			case v.Running == 0:
				n.Phase, n.Since, n.Updates = Updating, now, n.Updates+1
			}
		case Updating:
			switch {
			case !ok:
				fail(n, now, "the node left the fleet")
			case v.Seen && onVersions(v.Versions, target):
				if v.Incompatible != "" {
					fail(n, now, "validation: "+v.Incompatible)
				} else {
					n.Phase, n.Since = Validating, now
					acts = append(acts, Action{Kind: Validate, Node: n.Name, Reason: fmt.Sprintf("rollout %s: validating, %s", r.ID, r.direction(*n))})
				}
			case now.Sub(n.Since) > r.updateTimeout():
				fail(n, now, fmt.Sprintf("not on the target versions %s after the update was ordered (%s)", now.Sub(n.Since).Round(time.Second), gpufleet.VersionsText(v.Versions)))
			}
		case Validating:
			switch {
			case !ok:
				fail(n, now, "the node left the fleet")
			case v.State == gpufleet.NodeReady:
				n.Phase, n.Since = Baking, now // back in service: the bake watches it under work
			case v.State == gpufleet.NodeRepairing:
				fail(n, now, "validation: "+v.Reason)
			case now.Sub(n.Since) > r.updateTimeout():
				fail(n, now, fmt.Sprintf("no validation result after %s", now.Sub(n.Since).Round(time.Second)))
			}
		case Baking:
			switch {
			case !ok:
				fail(n, now, "the node left the fleet")
			case v.Health != gpufleet.Healthy:
				fail(n, now, fmt.Sprintf("health %s during the bake: %s", v.Health, v.Reason))
			case !onVersions(v.Versions, target):
				fail(n, now, "its versions changed during the bake: "+gpufleet.VersionsText(v.Versions))
			case now.Sub(n.Since) >= r.bake():
				n.Phase, n.Since = Complete, now
			}
		}
		if n.Phase == Failed && n.Reason != "" && !hasAction(acts, n.Name) {
			acts = append(acts, Action{Kind: Cordon, Node: n.Name, Reason: fmt.Sprintf("rollout %s failed here, %s: %s", r.ID, r.direction(*n), n.Reason)})
		}
	}
	if i := slices.IndexFunc(r.Nodes, func(n Node) bool { return n.Phase == Failed }); i >= 0 {
		back := r.State == RollingBack
		r.State, r.Reason = Halted, fmt.Sprintf("node %s failed a gate: %s", r.Nodes[i].Name, r.Nodes[i].Reason)
		r.Halt = r.Reason
		if r.OnHalt == HaltRollback && !back {
			if rb, err := Rollback(r, now); err == nil {
				rb.Reason = r.Reason + "; rolling back its updated nodes (on halt: rollback)"
				return rb, acts
			}
		}
		return r, acts
	}
	// The wave is through when its nodes are complete: start the next.
	for r.Wave <= len(r.Waves) && waveDone(r, r.Wave) {
		r.Wave++
	}
	if r.Wave > len(r.Waves) {
		if r.State == RollingBack {
			r.State = RolledBack
		} else {
			r.State = Done
		}
		return r, acts
	}
	if r.State == Paused {
		return r, acts // the nodes in flight went on; no other starts
	}
	// Start pending nodes of the wave while unavailability allows.
	busy := 0
	for _, n := range r.Nodes {
		if n.Phase == WaitingForJobs || n.Phase == Draining || n.Phase == Updating || n.Phase == Validating {
			busy++ // out of service (a baking node is back in it)
		}
	}
	// Nodes without production work first, then by name.
	order := make([]int, 0, len(r.Nodes))
	for i, n := range r.Nodes {
		if n.Wave == r.Wave && n.Phase == Pending {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := views[r.Nodes[a].Name].Production, views[r.Nodes[b].Name].Production
		switch {
		case pa == pb:
			return 0
		case pb:
			return -1
		}
		return 1
	})
	for _, i := range order {
		n := &r.Nodes[i]
		v, ok := views[n.Name]
		switch {
		case !ok:
			fail(n, now, "the node left the fleet")
			continue
		case busy >= r.MaxUnavailable:
			n.Waiting = ""
			continue
		case v.SpareShort != "":
			n.Waiting = v.SpareShort
			continue
		}
		if r.State == Running {
			n.Previous = v.Versions
		}
		n.Since, n.Waiting = now, ""
		busy++
		if r.DrainPolicy.waits() {
			n.Phase = WaitingForJobs
			acts = append(acts, Action{Kind: Cordon, Node: n.Name, Reason: fmt.Sprintf("rollout %s: cordoned, %s, before %s (wave %d)", r.ID, r.DrainPolicy.words(), r.direction(*n), r.Wave)})
			continue
		}
		n.Phase = Draining
		acts = append(acts, Action{Kind: Drain, Node: n.Name, Reason: fmt.Sprintf("rollout %s: %s (wave %d)", r.ID, r.direction(*n), r.Wave)})
	}
	return r, acts
}

// moving reports whether the leader steps the rollout.
func (r *Rollout) moving() bool {
	return r.State == Running || r.State == RollingBack || r.State == Paused
}

// Rollback turns a halted, aborted or done rollout around: every node it
// updated (complete or failed after its update) goes back to its previous
// versions, in one wave, with the same gates.
func Rollback(r Rollout, now time.Time) (Rollout, error) {
	switch r.State {
	case Halted, Aborted, Done, Paused:
	default:
		return r, fmt.Errorf("%w: rollout %s is %s: roll back a halted, aborted, paused or done rollout", gpufleet.ErrInvalid, r.ID, r.State)
	}
	r.Nodes = slices.Clone(r.Nodes)
	var back []Node
	for _, n := range r.Nodes {
		if n.Previous == nil || n.Phase == Pending {
			continue
		}
		back = append(back, Node{Name: n.Name, Wave: 1, Phase: Pending, Previous: n.Previous, Updates: n.Updates})
	}
	if len(back) == 0 {
		return r, fmt.Errorf("%w: rollout %s updated no node: nothing to roll back", gpufleet.ErrInvalid, r.ID)
	}
	r.Nodes, r.Waves, r.Wave, r.State, r.Reason, r.UpdatedAt = back, []float64{1}, 1, RollingBack, "", now
	return r, nil
}

// Abort stops a running, paused or halted rollout for good. Nothing is
// undone: its reason says what it leaves, node by node (updated,
// cordoned on the stack after a failed gate, out of service mid-step, not
// started), and how to undo it.
func Abort(r Rollout, by string, now time.Time) (Rollout, error) {
	switch r.State {
	case Running, Paused, Halted:
	default:
		return r, fmt.Errorf("%w: rollout %s is %s: nothing to abort", gpufleet.ErrInvalid, r.ID, r.State)
	}
	var updated, failed, inFlight, untouched []string
	for _, n := range r.Nodes {
		switch n.Phase {
		case Pending:
			untouched = append(untouched, n.Name)
		case Complete, Baking:
			updated = append(updated, n.Name)
		case Failed:
			failed = append(failed, n.Name+" ("+n.Reason+")")
		default:
			inFlight = append(inFlight, fmt.Sprintf("%s (%s)", n.Name, n.Phase))
		}
	}
	parts := []string{"aborted by " + by}
	if len(updated) > 0 {
		parts = append(parts, fmt.Sprintf("it leaves %s on stack %s (%s), in service", strings.Join(updated, ", "), r.Stack, gpufleet.VersionsText(r.Target)))
	}
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("%s failed a gate and stay cordoned", strings.Join(failed, ", ")))
	}
	if len(inFlight) > 0 {
		parts = append(parts, fmt.Sprintf("%s stay out of service mid-step (gpufleet uncordon NODE returns one as it is)", strings.Join(inFlight, ", ")))
	}
	if len(untouched) > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes were not started", len(untouched)))
	}
	if len(updated)+len(failed)+len(inFlight) > 0 {
		parts = append(parts, fmt.Sprintf("`gpufleet rollout rollback %s` returns every node it touched to its versions before the update", r.ID))
	}
	r.State, r.Reason, r.UpdatedAt = Aborted, strings.Join(parts, "; "), now
	return r, nil
}

// UpdateOrder is what an agent is told to run: a key it runs once, the
// command and the versions to reach.
type UpdateOrder struct {
	Key      string            `json:"key"`
	Command  string            `json:"command"`
	Versions map[string]string `json:"versions"`
}

// Order is the update a node should run now, if any: while it is in the
// updating phase.
func (r *Rollout) Order(node string) (UpdateOrder, bool) {
	if !r.moving() {
		return UpdateOrder{}, false
	}
	i := slices.IndexFunc(r.Nodes, func(n Node) bool { return n.Name == node })
	if i < 0 || r.Nodes[i].Phase != Updating {
		return UpdateOrder{}, false
	}
	n := r.Nodes[i]
	target := r.Target
	if r.State == RollingBack {
		target = n.Previous
	}
	return UpdateOrder{Key: fmt.Sprintf("%s/%s/%d", r.ID, node, n.Updates), Command: r.UpdateCommand, Versions: target}, true
}

// direction says which way a node goes and to what, for every message
// about it: "updating to stack prod-555 (driver 555.42.02, cuda 12.5)" or
// "rolling back to its versions before the update (driver 550.54.15)".
func (r *Rollout) direction(n Node) string {
	if r.State == RollingBack {
		return "rolling back to its versions before the update (" + gpufleet.VersionsText(n.Previous) + ")"
	}
	return fmt.Sprintf("updating to stack %s (%s)", r.Stack, gpufleet.VersionsText(r.Target))
}

func fail(n *Node, now time.Time, why string) {
	n.Phase, n.Since, n.Reason = Failed, now, why
}

func hasAction(acts []Action, node string) bool {
	return slices.ContainsFunc(acts, func(a Action) bool { return a.Node == node })
}

// waveDone reports whether every node of a wave is complete.
func waveDone(r Rollout, wave int) bool {
	for _, n := range r.Nodes {
		if n.Wave == wave && n.Phase != Complete {
			return false
		}
	}
	return true
}

// onVersions reports whether reported versions meet every target
// component (the agent's own version and components the target does not
// name are ignored).
func onVersions(have, target map[string]string) bool {
	pin, err := gpufleet.PinStack(toStack(target))
	return err == nil && pin.Unmet(gpufleet.NodeStack(have)) == ""
}

func toStack(v map[string]string) gpufleet.StackVersions {
	out := gpufleet.StackVersions{}
	for k, x := range v {
		out[gpufleet.StackComponent(k)] = x
	}
	return out
}
