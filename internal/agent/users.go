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
// --run-as names for the team, else as DefaultUser ("nobody"). An agent
// running as an ordinary user (gpufleet dev on a laptop) runs them as
// itself.
func (r *Runner) lookupUser(team string) (runAs, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			return runAs{Name: u.Username, Home: u.HomeDir}, nil
		}
		return runAs{Name: name}, nil
	}
	name := r.cfg.RunAs[team]
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
func RunAsDescription(runAs map[string]string, def string) string {
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
	if len(runAs) > 0 {
		s += fmt.Sprintf(" (per team: %v)", runAs)
	}
	return s
}
