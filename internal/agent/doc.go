// Package agent is gpufleet's node agent: it joins the control plane with
// a join token, keeps a node credential in its data directory, reports the
// node's GPUs, versions and labels, and heartbeats samples, health and
// attempt states; it starts the attempts the server assigns on exactly the
// assigned GPUs and stops them when told to, or on its own when it has lost
// the server for longer than its fence timeout (self-fencing).
//
// The parts:
//
//   - Agent (agent.go) is the I/O shell: registration, the heartbeat loop
//     with backoff, the sampler, log shipping and fencing. Its clock is a
//     field tests replace.
//   - Runner (runner.go) owns attempts: each runs under a small supervisor
//     process (`gpufleet agent supervise`, supervise.go) in its own session
//     that starts the command in its own process group, as an unprivileged
//     user, optionally in a cgroup v2, and records the exit status in
//     DATA_DIR/attempts/<id>/status.json. The runner keeps
//     DATA_DIR/state.json (written atomically) so that a restarted agent
//     re-adopts running attempts instead of killing them.
//   - Pure helpers, tested without processes: the attempt environment
//     (env.go), path validation (paths.go), stop escalation and fencing
//     (stop.go), accounting (accounting.go), health from events
//     (health.go), and the Prometheus collectors (metrics.go), which export
//     a native gpufleet_gpu_* set and a dcgm-exporter-compatible set.
//
// docs/AGENT.md is the user-facing description.
package agent
