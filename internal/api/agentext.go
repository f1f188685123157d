package api

import (
	"context"
	"io"
)

// FaultKinds are the faults `gpufleet fault inject --kind` takes; simulated
// nodes apply them, NVML nodes refuse them.
var FaultKinds = []string{"ecc-dbe", "ecc-sbe", "row-remap-pending", "row-remap-failure", "thermal", "power-brake",
	"pcie-downgrade", "nvlink-down", "fell-off-bus", "slow-memory", "nic-down"}

// FaultRequest is the body of POST /api/v1/nodes/{name}/faults: one fault
// on one GPU of a simulated node, either an XID or a kind.
type FaultRequest struct {
	GPU  *int   `json:"gpu"`
	XID  int    `json:"xid,omitempty"`
	Kind string `json:"kind,omitempty"`
}

// FaultOrder is a fault injection (or, with Clear, the end of every fault
// of a GPU) on its way to a node's agent.
type FaultOrder struct {
	ID    string `json:"id"`
	Node  string `json:"node"`
	GPU   int    `json:"gpu"`
	XID   int    `json:"xid,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Clear bool   `json:"clear,omitempty"`
}

// LogChunkResponse answers a shipped log chunk with the size the server
// now holds; the agent ships from there next.
type LogChunkResponse struct {
	AttemptID string `json:"attempt_id"`
	SizeBytes int64  `json:"size_bytes"`
}

// AgentLogService takes attempts' logs from agents. The server implements
// it next to AgentService; a server without it answers 422.
type AgentLogService interface {
	// AgentLog appends data, which starts at byte offset of the attempt's
	// log, to what the server holds (a part it already has is skipped) and
	// returns the size it now holds.
	AgentLog(ctx context.Context, p Principal, attempt string, offset int64, data io.Reader) (int64, error)
}

// FaultService injects and clears faults on simulated nodes (admin).
type FaultService interface {
	InjectFault(ctx context.Context, p Principal, node string, r FaultRequest) (FaultOrder, error)
	// ClearFaults ends every fault of one GPU.
	ClearFaults(ctx context.Context, p Principal, node string, gpu int) (FaultOrder, error)
}

// NodeReplacer replaces a node by another machine under the same name
// (admin): the node's credential is revoked and a join token bound to the
// name is issued. A server without it answers 422.
type NodeReplacer interface {
	ReplaceNode(ctx context.Context, p Principal, name string) (JoinTokenResponse, error)
}
