package web

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// stacksView is the stacks page: the rollouts, the named stacks and the
// nodes the compatibility rules find something on (docs/STACKS.md).
type stacksView struct {
	Rollouts []rolloutCard
	Stacks   []stackRow
	Findings []findingRow
}

// rolloutCard is one rollout with its nodes.
type rolloutCard struct {
	ID, Stack, State, Reason, Wave, Bake string
	// Halt is why a rollout that then rolled back or was aborted had
	// halted; Drain its drain policy; Warnings what a forced start
	// went past.
	Halt, Drain string
	Warnings    []string
	Nodes       []rolloutNodeRow
}

type rolloutNodeRow struct {
	Name, Wave, Phase, Since, Reason string
}

type stackRow struct {
	Name, State, Versions, Validated, Nodes string
}

type findingRow struct {
	Node, Severity, Component, Message, Source string
}

// maxRollouts bounds the rollouts the page shows: every unfinished one
// and the newest others up to this many.
const maxRollouts = 5

func (u *UI) stacksPage(r *http.Request, v *viewer) (view, error) {
	ctx := r.Context()
	rollouts, err := u.svc.Rollouts(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("rollouts: %w", err)
	}
	stacks, err := u.svc.Stacks(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("stacks: %w", err)
	}
	check, err := u.svc.StackCheck(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("stack check: %w", err)
	}
	var sv stacksView
	for i, ro := range rollouts {
		unfinished := ro.State == rollout.Running || ro.State == rollout.Paused || ro.State == rollout.Halted || ro.State == rollout.RollingBack
		if i >= maxRollouts && !unfinished {
			continue
		}
		card := rolloutCard{ID: ro.ID, Stack: ro.Stack, State: string(ro.State), Reason: ro.Reason, Halt: ro.Halt, Warnings: ro.Warnings,
			Wave: fmt.Sprintf("wave %d of %d", ro.Wave, len(ro.Waves)), Bake: time.Duration(ro.BakeS * float64(time.Second)).String(),
			Drain: ro.DrainPolicy.String()}
		if ro.State == rollout.Halted {
			card.Halt = "" // the reason says it
		}
		switch {
		case ro.Wave == 0:
			card.Wave = "the canary"
		case ro.Wave > len(ro.Waves) && ro.State == rollout.RolledBack:
			card.Wave = "every updated node rolled back"
		case ro.Wave > len(ro.Waves):
			card.Wave = "every wave through"
		}
		for _, n := range ro.Nodes {
			row := rolloutNodeRow{Name: n.Name, Wave: fmt.Sprint(n.Wave), Phase: string(n.Phase), Since: dash, Reason: n.Reason}
			if row.Reason == "" && n.Waiting != "" {
				row.Reason = "waiting: " + n.Waiting
			}
			if n.Wave == 0 {
				row.Wave = "canary"
			}
			if !n.Since.IsZero() {
				row.Since = fmtClock(n.Since)
			}
			card.Nodes = append(card.Nodes, row)
		}
		sv.Rollouts = append(sv.Rollouts, card)
	}
	for _, st := range stacks {
		var models []string
		for _, x := range st.Validated {
			models = append(models, x.GPUModel)
		}
		sv.Stacks = append(sv.Stacks, stackRow{Name: st.Name, State: st.State, Versions: gpufleet.VersionsText(st.Versions),
			Validated: strings.Join(models, ", "), Nodes: strings.Join(st.Nodes, ", ")})
	}
	for _, n := range check {
		for _, f := range n.Findings {
			sv.Findings = append(sv.Findings, findingRow{Node: n.Node, Severity: string(f.Severity), Component: string(f.Component),
				Message: f.Message, Source: f.Source})
		}
	}
	slices.SortStableFunc(sv.Findings, func(a, b findingRow) int { return strings.Compare(a.Severity, b.Severity) })
	return view{page: "stacks", title: "Stacks", nav: "stacks", live: "/ui/stacks", data: sv}, nil
}
