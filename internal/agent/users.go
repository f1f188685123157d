package agent

import (
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/gpufleet/gpufleet"
)

// lookupUser returns the account a team's attempts run as. An agent
// running as root never runs attempts as root: they run as the user
// --run-as names for the team; else, with a uid range
// (RunnerConfig.UIDs), as the team's own uid, the range's first plus the
// offset the server gave the team (the same on every node and for every
// attempt, so a job's files stay its own when it runs again), its gid the
// same number: no two teams share a user, so neither can read the other's
// environment or signal it; from a server that sends no offset, as a uid
// of the range no other live attempt holds; without a range, as
// DefaultUser ("nobody"). An agent running as an ordinary user (gpufleet
// dev on a laptop) runs them as itself. r.mu must be held.
func (r *Runner) lookupUser(team, attempt string) (runAs, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			return runAs{Name: u.Username, Home: u.HomeDir}, nil
		}
		return runAs{Name: name}, nil
	}
	name := r.cfg.RunAs[team]
	if a := r.attempts[attempt]; name == "" && r.cfg.UIDs != nil && a != nil && a.As.TeamUIDOffset != nil {
		// The team's own uid, the same on every node and for every attempt,
		// so that a job's files stay its own when it runs again.
		off := *a.As.TeamUIDOffset
		if off < 0 || uint64(off) > uint64(r.cfg.UIDs.Last-r.cfg.UIDs.First) {
			return runAs{}, fmt.Errorf("team %s's uid offset %d is outside --uid-range %s (widen it)", team, off, r.cfg.UIDs)
		}
		uid := r.cfg.UIDs.First + uint32(off)
		gid := uid
		return runAs{Name: "uid-" + strconv.FormatUint(uint64(uid), 10), UID: &uid, GID: &gid, Groups: []uint32{gid}}, nil
	}
	if name == "" && r.cfg.UIDs != nil {
		used := map[uint32]bool{}
		for id, a := range r.attempts {
			if id != attempt && a.UID != nil && !a.State.Terminal() {
				used[*a.UID] = true
			}
		}
		id, ok := pickUID(*r.cfg.UIDs, used, r.lastUID)
		if !ok {
			return runAs{}, fmt.Errorf("every uid of --uid-range %s is held by a running attempt", r.cfg.UIDs)
		}
		r.lastUID = id
		uid, gid := id, id
		return runAs{Name: "uid-" + strconv.FormatUint(uint64(id), 10), UID: &uid, GID: &gid, Groups: []uint32{gid}}, nil
	}
	if name == "" {
		name = r.cfg.DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		return runAs{}, fmt.Errorf("%w: run-as user %q for team %q: %v", gpufleet.ErrInvalid, name, team, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return runAs{}, fmt.Errorf("%w: run-as user %q: non-numeric uid or gid", gpufleet.ErrInvalid, name)
	}
	if uid == 0 {
		return runAs{}, fmt.Errorf("%w: run-as user %q for team %q is root: attempts never run as root", gpufleet.ErrInvalid, name, team)
	}
	u32, g32 := uint32(uid), uint32(gid)
	out := runAs{Name: name, UID: &u32, GID: &g32, Groups: []uint32{g32}, Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		out.Groups = out.Groups[:0]
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil && g != 0 {
				out.Groups = append(out.Groups, uint32(g))
			}
		}
	}
	return out, nil
}

// RunAsDescription says, for the start-up log, whom attempts run as.
func RunAsDescription(runAs map[string]string, def string, uids *UIDRange) string {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return "the agent's own user " + name + " (the agent is not root)"
	}
	if def == "" {
		def = "nobody"
	}
	s := "user " + def
	if uids != nil {
		s = "each team its own uid of " + uids.String()
	}
	if len(runAs) > 0 {
		s += fmt.Sprintf(" (per team: %v)", runAs)
	}
	return s
}
