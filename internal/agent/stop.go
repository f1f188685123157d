package agent

import (
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Stop escalation stages: what has been sent to an attempt's process group.
const (
	stageNone  = 0
	stageFirst = 1 // the job's stop signal, when it is not SIGTERM
	stageTerm  = 2 // SIGTERM: at once by default, after the grace when the job asked for another signal first
	stageKill  = 3 // SIGKILL at the end of the grace (KillAfter after SIGTERM at least)
)

// signalOf is the syscall signal of a job's stop signal (SIGTERM when it
// has none).
func signalOf(s gpufleet.Signal) syscall.Signal {
	if n := s.Number(); n > 0 {
		return syscall.Signal(n)
	}
	return syscall.SIGTERM
}

// stopStep returns the signal due now for a stop requested at `at` with
// the given grace, after the stages already sent, and the stage it
// reaches; 0 when nothing is due. It is the protocol of Kubernetes and
// Slurm: SIGTERM now, SIGKILL when the grace is over (killAfter at least,
// so a zero grace still lets SIGTERM act). A job whose stop signal is
// another (a checkpoint signal such as SIGUSR1) gets that now, SIGTERM
// when the grace is over and SIGKILL killAfter later. SIGKILL is
// repeated every killAfter while the group lives.
func stopStep(now, at time.Time, first syscall.Signal, grace, killAfter time.Duration, sent int, lastSent time.Time) (syscall.Signal, int) {
	killAt := at.Add(max(grace, killAfter))
	if first != syscall.SIGTERM {
		killAt = at.Add(grace + killAfter)
	}
	switch {
	case sent < stageFirst && first != syscall.SIGTERM:
		return first, stageFirst
	case sent < stageFirst:
		return syscall.SIGTERM, stageTerm
	case sent < stageTerm && !now.Before(at.Add(grace)):
		return syscall.SIGTERM, stageTerm
	case sent < stageKill && sent >= stageTerm && !now.Before(killAt):
		return syscall.SIGKILL, stageKill
	case sent == stageKill && !now.Before(lastSent.Add(killAfter)):
		return syscall.SIGKILL, stageKill
	}
	return 0, sent
}

// fenceDue reports whether an agent whose last successful heartbeat was at
// lastOK must stop its own attempts now: it has been without the server
// for longer than fenceAfter. The server declares the node's attempts lost
// only after heartbeat grace + fence + margin, so by then they are dead.
func fenceDue(now, lastOK time.Time, fenceAfter time.Duration) bool {
	return fenceAfter > 0 && now.Sub(lastOK) > fenceAfter
}

// fenceGrace is the grace a fenced attempt gets: its own, capped so that
// the escalation ends well before the server's margin runs out.
func fenceGrace(grace, limit time.Duration) time.Duration {
	return min(grace, limit)
}
