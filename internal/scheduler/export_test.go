package scheduler

// ScanAllVictimNodes makes preemption searches visit every node with
// preemptible work and cache failures per team, as before the preemption
// index, until the returned function is called: tests compare the two.
func ScanAllVictimNodes() (restore func()) {
	scanAllVictimNodes = true
	return func() { scanAllVictimNodes = false }
}

// ScanAllRackNodes makes single-node searches scan every node with free
// GPUs, judging each rack's power node by node, as before powerNodes,
// until the returned function is called: tests compare the two.
func ScanAllRackNodes() (restore func()) {
	scanAllRackNodes = true
	return func() { scanAllRackNodes = false }
}
