package agent

import (
	"syscall"
	"time"
)

// Stop escalation stages: what has been sent to an attempt's process group.
const (
	stageNone       = 0
	stageCheckpoint = 1 // SIGUSR1: checkpoint now
	stageTerm       = 2 // SIGTERM after the grace period
	stageKill       = 3 // SIGKILL after KillAfter more
)

// CheckpointSignal asks an attempt to checkpoint; it is the first signal
// of every stop. A program that does not handle it terminates (SIGUSR1's
// default action), which is also a stop.
const CheckpointSignal = syscall.SIGUSR1

// stopStep returns the signal due now for a stop requested at `at` with
// the given grace, after the stages already sent, and the stage it
// reaches. It returns 0 when nothing is due. SIGKILL is repeated every
// killAfter while the group lives.
func stopStep(now, at time.Time, grace, killAfter time.Duration, sent int, lastSent time.Time) (syscall.Signal, int) {
	switch {
	case sent < stageCheckpoint:
		return CheckpointSignal, stageCheckpoint
	case sent < stageTerm && !now.Before(at.Add(grace)):
		return syscall.SIGTERM, stageTerm
	case sent < stageKill && !now.Before(at.Add(grace+killAfter)):
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
