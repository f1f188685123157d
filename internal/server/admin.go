package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Teams lists teams with what each uses now (GPUs held per class). A
// member sees its own team only.
func (s *Server) Teams(ctx context.Context, p api.Principal) ([]gpufleet.Team, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	teams, err := s.st.Teams(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := s.st.ActiveJobs(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	model := modelsByUUID(nodes) // GPU or MIG UUID -> catalog id
	used := map[string]map[string]int{}
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			if used[j.Team] == nil {
				used[j.Team] = map[string]int{}
			}
			for _, n := range a.Nodes {
				for _, g := range n.GPUs {
					used[j.Team][model[g]]++
				}
			}
		}
	}
	out := []gpufleet.Team{}
	for _, t := range teams {
		if !visible(p, t.Name) {
			continue
		}
		t.Used = used[t.Name]
		if t.Used == nil {
			t.Used = map[string]int{}
		}
		if t.Quota == nil {
			t.Quota = map[string]int{}
		}
		out = append(out, t)
	}
	return out, nil
}

// PutTeam creates or updates a team (admin only).
func (s *Server) PutTeam(ctx context.Context, p api.Principal, r api.TeamRequest) (gpufleet.Team, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Team{}, err
	}
	if err := gpufleet.ValidateName("name", r.Name); err != nil {
		return gpufleet.Team{}, err
	}
	t, err := s.st.Team(ctx, r.Name)
	if errors.Is(err, gpufleet.ErrNotFound) {
		t = gpufleet.Team{Name: r.Name, Quota: map[string]int{}, BorrowingLimit: -1, Weight: 1}
	} else if err != nil {
		return gpufleet.Team{}, err
	}
	classes, err := s.st.Classes(ctx)
	if err != nil {
		return gpufleet.Team{}, err
	}
	if r.Quota != nil {
		t.Quota = r.Quota
	}
	if r.BorrowingLimit != nil {
		t.BorrowingLimit = *r.BorrowingLimit
	}
	if r.Weight != nil {
		t.Weight = *r.Weight
	}
	if r.Mounts != nil {
		t.Mounts = *r.Mounts
	}
	for reg, c := range r.RegistryAuth {
		if err := gpufleet.ValidateRegistry(reg); err != nil {
			return gpufleet.Team{}, gpufleet.InField("registry_auth", err)
		}
		if t.RegistryAuth == nil {
			t.RegistryAuth = map[string]gpufleet.RegistryCredential{}
		}
		if c == nil {
			delete(t.RegistryAuth, reg)
		} else {
			t.RegistryAuth[reg] = *c
		}
	}
	t.Registries = slices.Sorted(maps.Keys(t.RegistryAuth))
	if err := t.Validate(); err != nil {
		return gpufleet.Team{}, err
	}
	for _, c := range slices.Sorted(maps.Keys(r.Quota)) {
		isClass := slices.ContainsFunc(classes, func(k gpufleet.Class) bool { return k.Name == c })
		if _, err := s.cat.Lookup(c); err != nil && !isClass {
			return gpufleet.Team{}, fmt.Errorf("%w: quota class %s: not a catalog id or a defined class", gpufleet.ErrInvalid, gpufleet.Quote(c))
		}
	}
	if err := s.st.PutTeam(ctx, t, actor(p)); err != nil {
		return gpufleet.Team{}, err
	}
	s.nudge()
	return t, nil
}

// Classes lists the admin-defined GPU classes.
func (s *Server) Classes(ctx context.Context, p api.Principal) ([]gpufleet.Class, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	c, err := s.st.Classes(ctx)
	if c == nil {
		c = []gpufleet.Class{}
	}
	return c, err
}

// PutClass defines a GPU class over catalog ids (admin only).
func (s *Server) PutClass(ctx context.Context, p api.Principal, c gpufleet.Class) (gpufleet.Class, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Class{}, err
	}
	if err := c.Validate(); err != nil {
		return gpufleet.Class{}, err
	}
	for i, m := range c.Models {
		g, err := s.cat.Lookup(m)
		if err != nil {
			return gpufleet.Class{}, fmt.Errorf("models[%d]: %w", i, err)
		}
		c.Models[i] = g.ID
	}
	return c, s.st.PutClass(ctx, c, actor(p))
}

// Tokens lists token metadata (admin only); secrets are never shown again.
func (s *Server) Tokens(ctx context.Context, p api.Principal) ([]gpufleet.Token, error) {
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	recs, err := s.st.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	out := []gpufleet.Token{}
	for _, r := range recs {
		out = append(out, gpufleet.Token{ID: r.ID, Team: r.Team, Role: r.Role, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt})
	}
	return out, nil
}

// CreateToken issues a token (admin only). The secret is in the answer
// once and stored only as a hash.
func (s *Server) CreateToken(ctx context.Context, p api.Principal, r api.TokenRequest) (gpufleet.Token, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Token{}, err
	}
	switch r.Role {
	case gpufleet.RoleMember:
		if _, err := s.st.Team(ctx, r.Team); err != nil {
			return gpufleet.Token{}, fmt.Errorf("team %s: %w", gpufleet.Quote(r.Team), err)
		}
	case gpufleet.RoleAdmin, gpufleet.RoleMonitor:
		if r.Team != "" {
			return gpufleet.Token{}, fmt.Errorf("%w: team: %s tokens are fleet-wide and name no team", gpufleet.ErrInvalid, r.Role)
		}
	default:
		if _, err := gpufleet.ParseRole(string(r.Role)); err != nil {
			return gpufleet.Token{}, err
		}
		return gpufleet.Token{}, fmt.Errorf("%w: role %s", gpufleet.ErrInvalid, r.Role)
	}
	id, token, hash := newSecret(userPrefix)
	now := s.now()
	if err := s.st.CreateToken(ctx, store.TokenRecord{ID: id, Hash: hash, Team: r.Team, Role: r.Role, CreatedAt: now}, actor(p)); err != nil {
		return gpufleet.Token{}, err
	}
	return gpufleet.Token{ID: id, Token: token, Team: r.Team, Role: r.Role, CreatedAt: now}, nil
}

// RevokeToken revokes a token by id (admin only).
func (s *Server) RevokeToken(ctx context.Context, p api.Principal, id string) error {
	if err := requireAdmin(p); err != nil {
		return err
	}
	if err := s.st.RevokeToken(ctx, id, s.now(), actor(p)); err != nil {
		return err
	}
	s.forget(userPrefix + id)
	return nil
}

// CreateJoinToken issues a join token for agents (admin only): single-use
// without a TTL, reusable until it expires with one, optionally bound to a
// node name.
func (s *Server) CreateJoinToken(ctx context.Context, p api.Principal, r api.JoinTokenRequest) (api.JoinTokenResponse, error) {
	if err := requireAdmin(p); err != nil {
		return api.JoinTokenResponse{}, err
	}
	if r.Node != "" {
		if err := gpufleet.ValidateNodeName("node", r.Node); err != nil {
			return api.JoinTokenResponse{}, err
		}
	}
	if r.TTL < 0 || r.TTL.Std() > gpufleet.MaxDuration {
		return api.JoinTokenResponse{}, fmt.Errorf("%w: ttl %s: expected at most %s", gpufleet.ErrInvalid, r.TTL, gpufleet.Duration(gpufleet.MaxDuration))
	}
	now := s.now()
	jt := store.JoinToken{Node: r.Node, SingleUse: r.TTL == 0, CreatedAt: now}
	if r.TTL > 0 {
		exp := now.Add(r.TTL.Std())
		jt.ExpiresAt = &exp
	}
	return s.issueJoinToken(ctx, jt, actor(p))
}

// issueJoinToken stores jt with a fresh secret and returns it with the
// secret, the only time it is shown.
func (s *Server) issueJoinToken(ctx context.Context, jt store.JoinToken, actor string) (api.JoinTokenResponse, error) {
	id, token, hash := newSecret(joinPrefix)
	jt.ID, jt.Hash = id, hash
	if err := s.st.CreateJoinToken(ctx, jt, actor); err != nil {
		return api.JoinTokenResponse{}, err
	}
	return api.JoinTokenResponse{ID: id, Token: token, Node: jt.Node, ExpiresAt: jt.ExpiresAt, SingleUse: jt.SingleUse}, nil
}

// Usage reports GPU-hours, effective GPU-hours and energy by team and GPU
// model over a period (default: the last 30 days), with the idle
// allocated GPU-hours counted from the per-GPU rollups and priced at the
// catalog's hourly price. Members see their own team.
func (s *Server) Usage(ctx context.Context, p api.Principal, q api.UsageQuery) (api.UsageReport, error) {
	if err := requireUser(p); err != nil {
		return api.UsageReport{}, err
	}
	team := q.Team
	if !p.IsAdmin() {
		if team != "" && team != p.Team {
			return api.UsageReport{}, fmt.Errorf("%w: team %s", gpufleet.ErrNotFound, gpufleet.Quote(team))
		}
		team = p.Team
	}
	if q.To.IsZero() {
		q.To = s.now()
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-30 * 24 * time.Hour)
	}
	if err := s.acct.flush(ctx); err != nil {
		return api.UsageReport{}, err
	}
	rows, err := s.st.Usage(ctx, team, q.From, q.To)
	if err != nil {
		return api.UsageReport{}, err
	}
	if err := s.tele.flush(ctx, s.now(), true); err != nil {
		return api.UsageReport{}, err
	}
	idle, err := s.st.IdleAllocated(ctx, team, q.From, q.To)
	if err != nil {
		return api.UsageReport{}, err
	}
	by := map[string]map[string]*api.ModelUsage{}
	get := func(team, model string) *api.ModelUsage {
		if by[team] == nil {
			by[team] = map[string]*api.ModelUsage{}
		}
		m := by[team][model]
		if m == nil {
			m = &api.ModelUsage{Model: model}
			by[team][model] = m
		}
		return m
	}
	for _, r := range rows {
		m := get(r.Team, r.Model)
		m.GPUHours += r.GPUSeconds / 3600
		m.EffectiveGPUHours += r.EffectiveGPUSeconds / 3600
		m.EnergyJoules += r.EnergyJoules
	}
	for _, r := range idle {
		m := get(r.Team, r.Model)
		// Idle time is part of the held time. The two are measured apart
		// (idle from the heartbeats' rollups, which count a GPU held from
		// its placement to the next snapshot after the attempt ends; held
		// from the attempts' own reports, from process start and up to a
		// heartbeat behind), so a short attempt can show a few seconds
		// more idle than held: the attempts' figure bounds it.
		m.IdleAllocatedGPUHour = min(m.IdleAllocatedGPUHour+r.Seconds/3600, m.GPUHours)
		if g, err := s.cat.Lookup(r.Model); err == nil && g.PricePerHourUSD != nil {
			m.IdleAllocatedUSD = m.IdleAllocatedGPUHour * *g.PricePerHourUSD
		}
	}
	rep := api.UsageReport{From: q.From, To: q.To, Teams: []api.TeamUsage{}}
	for team, models := range by {
		u := api.TeamUsage{Team: team, Models: []api.ModelUsage{}}
		for _, m := range models {
			u.GPUHours += m.GPUHours
			u.EffectiveGPUHours += m.EffectiveGPUHours
			u.IdleAllocatedGPUHour += m.IdleAllocatedGPUHour
			u.IdleAllocatedUSD += m.IdleAllocatedUSD
			u.EnergyJoules += m.EnergyJoules
			u.Models = append(u.Models, *m)
		}
		slices.SortFunc(u.Models, func(a, b api.ModelUsage) int { return strings.Compare(a.Model, b.Model) })
		rep.Teams = append(rep.Teams, u)
	}
	slices.SortFunc(rep.Teams, func(a, b api.TeamUsage) int { return strings.Compare(a.Team, b.Team) })
	if rep.Energy, err = s.energy(ctx, team, q, rows); err != nil {
		return api.UsageReport{}, err
	}
	rep.PUE, rep.GridIntensity, rep.GridIntensityHourly = s.cfg.PUE, s.cfg.Intensity.Constant, s.cfg.Intensity.Hourly()
	rep.By, rep.Period = cmp.Or(q.By, api.EnergyByTeam), cmp.Or(q.Period, string(power.PeriodAll))
	return rep, nil
}

// energy is the usage's energy rows: from the daily usage rows by team or
// GPU model (facility energy at the PUE of the racks the GPUs were in
// when counted), from the attempts that started in the period by job
// (at the PUE of the racks their nodes are in now), with the work the
// jobs reported.
func (s *Server) energy(ctx context.Context, team string, q api.UsageQuery, rows []store.UsageRow) ([]api.EnergyRow, error) {
	period, err := power.ParsePeriod(q.Period)
	if err != nil {
		return nil, err
	}
	const sep = "\x00"
	var uses []power.Use
	units := map[string]string{}
	switch q.By {
	case api.EnergyByJob:
		pue, err := s.racks.nodesPUE(ctx)
		if err != nil {
			return nil, err
		}
		err = s.eachJob(ctx, team, func(j gpufleet.Job) {
			for _, a := range j.Attempts {
				if a.StartedAt == nil || a.StartedAt.Before(q.From) || !a.StartedAt.Before(q.To) {
					continue
				}
				end := q.To
				if a.FinishedAt != nil {
					end = *a.FinishedAt
				}
				key := j.Team + sep + j.ID
				if j.Work != nil {
					units[key] = j.Work.UnitName()
				}
				uses = append(uses, power.Use{Key: key, From: *a.StartedAt, To: end, GPUSeconds: a.GPUSeconds, Joules: a.EnergyJoules,
					PUE: attemptPUE(a, pue, s.cfg.PUE), Work: a.Work})
			}
		})
		if err != nil {
			return nil, err
		}
	default:
		for _, r := range rows {
			key := r.Team
			if q.By == api.EnergyByModel {
				key = sep + r.Model
			}
			u := power.Use{Key: key, From: r.Day, To: r.Day.Add(24 * time.Hour), GPUSeconds: r.GPUSeconds, Joules: r.EnergyJoules}
			if r.FacilityJoules != nil && r.EnergyJoules > 0 {
				u.PUE = *r.FacilityJoules / r.EnergyJoules
			}
			uses = append(uses, u)
		}
	}
	out := []api.EnergyRow{}
	for _, r := range power.Account(uses, period, s.cfg.PUE, s.cfg.Intensity) {
		e := api.EnergyRow{GPUHours: r.GPUSeconds / 3600, GPUEnergyKWh: power.KWh(r.GPUJoules),
			FacilityEnergyKWh: power.KWh(r.FacilityJoules), CO2eKg: r.CO2eGrams / 1000, AvgGPUWatts: r.AvgGPUWatts(),
			Work: r.Work, WorkUnit: units[r.Key], JoulesPerUnit: r.JoulesPerUnit()}
		if !r.PeriodStart.IsZero() {
			e.PeriodStart = &r.PeriodStart
		}
		first, second, _ := strings.Cut(r.Key, sep)
		switch q.By {
		case api.EnergyByJob:
			e.Team, e.Job = first, second
		case api.EnergyByModel:
			e.Model = second
		default:
			e.Team = first
		}
		out = append(out, e)
	}
	return out, nil
}

// attemptPUE is the mean PUE of an attempt's nodes (def outside racks).
func attemptPUE(a gpufleet.Attempt, pue map[string]float64, def float64) float64 {
	if len(a.Nodes) == 0 {
		return def
	}
	sum := 0.0
	for _, n := range a.Nodes {
		p, ok := pue[n.Name]
		if !ok {
			p = def
		}
		sum += p
	}
	return sum / float64(len(a.Nodes))
}

// eachJob calls fn for every job of team (every team when empty).
func (s *Server) eachJob(ctx context.Context, team string, fn func(gpufleet.Job)) error {
	f := store.JobFilter{Team: team, Limit: 500}
	for {
		jobs, next, err := s.st.ListJobs(ctx, f)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			fn(j)
		}
		if next == "" {
			return nil
		}
		f.After = next
	}
}
