package agent

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// basePath is PATH for attempts whose job sets none; the agent's own
// environment (which may hold its join token) never reaches an attempt.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// attemptEnv builds an attempt's environment: a minimal base, the job's
// env, then what gpufleet sets, which the job cannot override:
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (exactly the assigned GPU
// or MIG UUIDs), GPUFLEET_JOB_ID, GPUFLEET_ATTEMPT_ID and, for every
// attempt, the rendezvous variables GPUFLEET_NODE_RANK, GPUFLEET_NNODES,
// GPUFLEET_GPUS_PER_NODE, MASTER_ADDR and MASTER_PORT. The result is
// sorted.
func attemptEnv(as api.Assignment, user, home, workdir string) ([]string, error) {
	env := map[string]string{"PATH": basePath, "HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "PWD": workdir}
	for k, v := range as.Env {
		if !validEnvName(k) {
			return nil, fmt.Errorf("%w: env %q: expected a name of letters, digits and '_'", gpufleet.ErrInvalid, k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: env %s: NUL in value", gpufleet.ErrInvalid, k)
		}
		env[k] = v
	}
	gpus := strings.Join(as.GPUs, ",")
	nnodes := max(as.NNodes, 1)
	perNode := as.GPUsPerNode
	if perNode == 0 {
		perNode = len(as.GPUs)
	}
	set := map[string]string{
		"CUDA_VISIBLE_DEVICES":   gpus,
		"NVIDIA_VISIBLE_DEVICES": gpus,
		"GPUFLEET_JOB_ID":        as.JobID,
		"GPUFLEET_ATTEMPT_ID":    as.AttemptID,
		"GPUFLEET_TEAM":          as.Team,
		"GPUFLEET_NODE_RANK":     strconv.Itoa(as.NodeRank),
		"GPUFLEET_NNODES":        strconv.Itoa(nnodes),
		"GPUFLEET_GPUS_PER_NODE": strconv.Itoa(perNode),
	}
	if as.MasterAddr != "" {
		set["MASTER_ADDR"] = as.MasterAddr
	}
	if as.MasterPort != 0 {
		set["MASTER_PORT"] = strconv.Itoa(as.MasterPort)
	}
	maps.Copy(env, set)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}
