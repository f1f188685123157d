package scheduler

// ScanAllVictimNodes makes preemption searches visit every node with
// preemptible work and cache failures per team, as before the preemption
// index, until the returned function is called: tests compare the two.
func ScanAllVictimNodes() (restore func()) {
	scanAllVictimNodes = true
	return func() { scanAllVictimNodes = false }
}
