package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/model"
)

// submitFlags are the flags of `submit`. Only flags given on the command
// line override the job file.
type submitFlags struct {
	gpus, nodes, retries                                                  int
	cpus                                                                  float64
	gpuModels, gpuMemory, minCC, precision, interconnect, sharing, prefer string
	memory                                                                string
	nodeSelector, env, requires, labels                                   []string
	stack, isolation, overhead                                            string
	priority, team, timeLimit, estimate, grace                            string
	workdir, requestID, simLoad, name                                     string
	workMetric, workUnit                                                  string
	image, pullPolicy, stopSignal, shmSize                                string
	mounts                                                                []string
	preemptible, strict, queueAnyway, hostNetwork                         bool
	plan                                                                  planFlags
}

// submitPlanFlags are the planner flags submit shares with plan; plan's
// --gpus, --gpu and --precision mean other things here (the job's GPU
// count, --gpu-model and the job's precision).
var submitPlanFlags = []string{"model", "mode", "kv-precision", "batch", "input-tokens", "output-tokens", "seq",
	"micro-batch", "global-batch", "optimizer", "zero", "recompute", "tp", "pp", "dp", "cp", "ep", "tokens", "fp32-grad-accum",
	"scenario", "latency-target-ms", "tpot-target-ms", "ttft-target-ms", "engine", "memory-headroom", "max-model-len", "max-num-batched-tokens", "max-num-seqs"}

func (f *submitFlags) bind(fs *pflag.FlagSet) {
	fs.IntVar(&f.gpus, "gpus", 0, "total GPUs (over all nodes)")
	fs.IntVar(&f.nodes, "nodes", 0, "nodes to spread the GPUs over (a gang)")
	fs.StringVar(&f.gpuModels, "gpu-model", "", "acceptable GPU catalog ids or classes, comma-separated")
	fs.StringVar(&f.gpuMemory, "gpu-memory", "", "minimum memory per GPU, such as 80GiB or 141GB")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit per node for the attempt, such as 16 or 0.5 (cgroup v2; 0: none)")
	fs.StringVar(&f.memory, "memory", "", "host memory limit per node for the attempt, such as 64GiB (cgroup v2)")
	fs.StringVar(&f.minCC, "min-compute-capability", "", "minimum CUDA compute capability, such as 8.0")
	fs.StringVar(&f.precision, "precision", "", "precision the GPUs must support natively: fp32, bf16, fp16, fp8, int8, int4, fp4")
	fs.StringVar(&f.interconnect, "interconnect", "", "nvlink or any")
	fs.StringVar(&f.sharing, "sharing", "", "exclusive, mig:PROFILE (mig:1g.18gb) or timeslice:FRACTION (timeslice:0.25)")
	fs.StringVar(&f.isolation, "isolation", "", "isolation the job needs from its GPU's mechanism: hard (whole GPU or MIG, not a time-sliced vGPU), soft (time-slicing too) or any; default from the priority class (production: hard)")
	fs.StringVar(&f.overhead, "overhead", "", "most overhead the mechanism may cost, such as \"<=5%\" (passthrough ~2%, vGPU ~5%, time-slicing ~5%)")
	fs.StringVar(&f.prefer, "prefer", "", "cheapest, fastest or efficient (highest peak per watt: fewest joules for compute-bound work) among fitting GPUs")
	fs.StringArrayVar(&f.nodeSelector, "node-selector", nil, "node label KEY=VALUE the nodes must carry (repeatable)")
	fs.StringVar(&f.stack, "stack", "", "a stack (gpufleet stacks) whose versions the nodes must run")
	fs.StringArrayVar(&f.requires, "require", nil, "a component version the nodes must have: cuda>=12.4, driver>=550, torch=2.5, nccl>=2.21,<2.23 (repeatable; docs/STACKS.md)")
	fs.StringVar(&f.priority, "priority", "", "production, interactive, training or batch")
	fs.StringVar(&f.team, "team", "", "team to run as (admins; members run as their own team)")
	fs.StringVar(&f.timeLimit, "time-limit", "", "stop the job after this long (90s, 4h, 2d)")
	fs.StringVar(&f.estimate, "estimate", "", "expected run time, for queue ETAs and backfill (90s, 4h)")
	fs.BoolVar(&f.preemptible, "preemptible", false, "the job may be preempted by higher priorities (it requeues)")
	fs.StringVar(&f.grace, "grace", "", "time between the stop signal and the kill (30s)")
	fs.IntVar(&f.retries, "retries", 0, "times to rerun the job after its own failure")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	fs.StringVar(&f.workdir, "workdir", "", "working directory on the node (in the container, with --image)")
	fs.StringVar(&f.image, "image", "", "OCI image to run the command in (podman or docker nodes: docs/JOBS.md#containers)")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", "", "when the node pulls the image: always, if-not-present (default) or never")
	fs.StringVar(&f.stopSignal, "stop-signal", "", "first signal of every stop (default SIGTERM): SIGUSR1, SIGINT, ... then SIGTERM after the grace")
	fs.StringArrayVar(&f.mounts, "mount", nil, "host path a container job sees, SOURCE[:TARGET][:ro|rw], within the team's allowed paths (repeatable; read-only by default)")
	fs.StringVar(&f.shmSize, "shm-size", "", "size of the container's /dev/shm (PyTorch DataLoader workers), such as 16GiB")
	fs.BoolVar(&f.hostNetwork, "host-network", false, "run the container in the node's network (multi-node jobs always are)")
	fs.StringVar(&f.requestID, "request-id", "", "idempotency key: resubmitting with the same id returns the same job")
	fs.StringVar(&f.simLoad, "sim-load", "", "load on simulated GPUs: compute, memory or idle")
	fs.StringVar(&f.name, "name", "", "job name")
	fs.StringArrayVarP(&f.labels, "labels", "l", nil, "labels KEY=VALUE the job carries, for selectors (jobs -l, cancel -l): repeatable and comma-separated, as kubectl's (team=nlp,sweep=7)")
	fs.StringVar(&f.workMetric, "work-metric", "", "regular expression for the work the job prints, its first group the running count ('tokens=([0-9]+)'): energy per unit of work")
	fs.StringVar(&f.workUnit, "work-unit", "", "what --work-metric counts: tokens, samples, images (default units)")
	fs.BoolVar(&f.strict, "strict", false, "reject the job when its request is smaller than the planner's plan (default: warn)")
	fs.BoolVar(&f.queueAnyway, "queue-anyway", false, "queue the job even if no node of the fleet can hold it now (its nodes have not joined yet)")
	tmp := pflag.NewFlagSet("plan", pflag.ContinueOnError)
	f.plan.bind(tmp)
	for _, name := range submitPlanFlags {
		fl := tmp.Lookup(name)
		if name == "model" {
			fl.Usage = "admit through the planner for this model: a config.json path or a built-in name"
		}
		fs.AddFlag(fl)
	}
}

// workCounter is w, or a new counter to fill.
func workCounter(w *gpufleet.WorkCounter) *gpufleet.WorkCounter {
	if w == nil {
		return &gpufleet.WorkCounter{}
	}
	return w
}

// request builds the submit request: the job file (if any), then the flags
// given, then the command after --.
func (f *submitFlags) request(e *env, fs *pflag.FlagSet, fileArgs, command []string) (api.SubmitRequest, error) {
	var req api.SubmitRequest
	if len(fileArgs) > 1 {
		return req, usageErr("more than one job file (%s): put the command after --", strings.Join(fileArgs, " "))
	}
	if len(fileArgs) == 1 {
		var err error
		if req, err = readJobFile(e, fileArgs[0]); err != nil {
			return req, err
		}
	}
	res := &req.Resources
	text := func(dst interface{ UnmarshalText([]byte) error }, v string) func() error {
		return func() error { return dst.UnmarshalText([]byte(v)) }
	}
	var err error
	steps := []struct {
		flag  string
		apply func() error
	}{
		{"gpus", func() error { res.GPUs = f.gpus; return nil }},
		{"nodes", func() error { res.Nodes = f.nodes; return nil }},
		{"gpu-model", func() error { res.GPUModels = splitComma(f.gpuModels); return nil }},
		{"gpu-memory", func() error { res.GPUMemoryMinBytes, err = gpufleet.ParseBytes(f.gpuMemory); return err }},
		{"cpus", func() error { res.CPUs = f.cpus; return nil }},
		{"memory", func() error { res.MemoryBytes, err = gpufleet.ParseBytes(f.memory); return err }},
		{"min-compute-capability", func() error {
			res.MinComputeCapability, err = gpufleet.ParseComputeCapability(f.minCC)
			return err
		}},
		{"precision", func() error { res.Precision, err = gpufleet.ParsePrecision(f.precision); return err }},
		{"interconnect", text(&res.Interconnect, f.interconnect)},
		{"sharing", func() error { res.Sharing, err = gpufleet.ParseSharing(f.sharing); return err }},
		{"isolation", text(&res.Isolation, f.isolation)},
		{"overhead", func() error {
			o, err := gpufleet.ParseOverhead(f.overhead)
			res.Overhead = &o
			return err
		}},
		{"prefer", text(&res.Prefer, f.prefer)},
		{"node-selector", func() error {
			m, err := parseKV(f.nodeSelector)
			res.NodeSelector = mergeKV(res.NodeSelector, m)
			return err
		}},
		{"stack", func() error { res.Stack = f.stack; return nil }},
		{"require", func() error {
			m, err := parseRequires(f.requires)
			res.Requires = mergeKV(res.Requires, m)
			return err
		}},
		{"priority", func() error { req.Priority, err = gpufleet.ParsePriority(f.priority); return err }},
		{"team", func() error { req.Team = f.team; return nil }},
		{"time-limit", text(&req.TimeLimit, f.timeLimit)},
		{"estimate", text(&req.Estimate, f.estimate)},
		{"grace", text(&req.Grace, f.grace)},
		{"preemptible", func() error { req.Preemptible = f.preemptible; return nil }},
		{"retries", func() error { req.Retries = f.retries; return nil }},
		{"env", func() error {
			m, err := parseKV(f.env)
			req.Env = mergeKV(req.Env, m)
			return err
		}},
		{"workdir", func() error { req.Workdir = f.workdir; return nil }},
		{"image", func() error { req.Image = f.image; return gpufleet.ValidateImageRef(f.image) }},
		{"image-pull-policy", text(&req.ImagePullPolicy, f.pullPolicy)},
		{"stop-signal", text(&req.StopSignal, f.stopSignal)},
		{"mount", func() error {
			for _, v := range f.mounts {
				m, err := gpufleet.ParseMount(v)
				if err != nil {
					return err
				}
				req.Mounts = append(req.Mounts, m)
			}
			return nil
		}},
		{"shm-size", func() error { req.ShmSize, err = gpufleet.ParseBytes(f.shmSize); return err }},
		{"host-network", func() error { req.HostNetwork = f.hostNetwork; return nil }},
		{"request-id", func() error { req.RequestID = f.requestID; return nil }},
		{"sim-load", text(&req.SimLoad, f.simLoad)},
		{"name", func() error { req.Name = f.name; return nil }},
		{"labels", func() error {
			m, err := parseLabelFlags(f.labels)
			req.Labels = mergeKV(req.Labels, m)
			return err
		}},
		{"work-metric", func() error { req.Work = workCounter(req.Work); req.Work.Metric = f.workMetric; return nil }},
		{"work-unit", func() error { req.Work = workCounter(req.Work); req.Work.Unit = f.workUnit; return nil }},
		{"strict", func() error { req.Strict = f.strict; return nil }},
		{"queue-anyway", func() error { req.AllowUnsatisfiable = f.queueAnyway; return nil }},
	}
	for _, st := range steps {
		if !fs.Changed(st.flag) {
			continue
		}
		if err := st.apply(); err != nil {
			if ie := gpufleet.InField("--"+st.flag, err); ie != err {
				return req, ie
			}
			return req, fmt.Errorf("--%s: %w", st.flag, err)
		}
	}
	if err := f.applyModel(fs, &req); err != nil {
		return req, err
	}
	if len(command) > 0 {
		req.Command = command
	}
	if err := req.Validate(); err != nil {
		var ve *gpufleet.ValueError
		if errors.As(err, &ve) {
			if flag, ok := fieldFlags[ve.Field]; ok && fs.Changed(flag) {
				return req, gpufleet.InField("--"+flag, err)
			}
		}
		return req, err
	}
	return req, nil
}

// fieldFlags names the submit flag that sets a request field, so that a
// refused value is reported as the user wrote it.
var fieldFlags = map[string]string{
	"resources.gpus": "gpus", "resources.nodes": "nodes", "retries": "retries",
	"model.batch": "batch", "model.tp": "tp", "model.pp": "pp", "model.zero": "zero",
}

// applyModel sets req.Model from --model and the planner flags.
func (f *submitFlags) applyModel(fs *pflag.FlagSet, req *api.SubmitRequest) error {
	changed := false
	for _, name := range submitPlanFlags {
		changed = changed || fs.Changed(name)
	}
	if !changed {
		return nil
	}
	m := req.Model
	if m == nil {
		m = &api.ModelRequest{}
	}
	if fs.Changed("model") {
		mr, err := modelRequest(f.plan.model)
		if err != nil {
			return err
		}
		m.Name, m.Config = mr.Name, mr.Config
	}
	if m.Name == "" && m.Config == nil {
		return usageErr("planner flags (--mode, --batch, ...) need --model or a model in the job file")
	}
	// The flags are read as plan reads them; the model block takes
	// those given (and the mode, always).
	r, err := f.plan.spec().Request(nil, nil, flagName)
	if err != nil {
		return flagErr(err)
	}
	if r.BatchMax {
		return usageErr("--batch max: a job's batch is a number of sequences")
	}
	for _, c := range []struct {
		flag string
		set  func()
	}{
		{"mode", func() { m.Mode = string(r.Mode) }}, {"kv-precision", func() { m.KVPrecision = string(r.KVPrecision) }},
		{"batch", func() { m.Batch = r.Batch }}, {"input-tokens", func() { m.InputTokens = r.InputTokens }},
		{"output-tokens", func() { m.OutputTokens = r.OutputTokens }}, {"seq", func() { m.Seq = r.Seq }},
		{"micro-batch", func() { m.MicroBatch = r.MicroBatch }}, {"global-batch", func() { m.GlobalBatch = r.GlobalBatch }},
		{"optimizer", func() { m.Optimizer = string(r.Optimizer) }}, {"zero", func() { m.ZeRO = r.ZeRO }},
		{"recompute", func() { m.Recompute = string(r.Recompute) }},
		{"tp", func() { m.TP = r.TP }}, {"pp", func() { m.PP = r.PP }}, {"dp", func() { m.DP = r.DP }},
		{"cp", func() { m.CP = r.CP }}, {"ep", func() { m.EP = r.EP }}, {"tokens", func() { m.Tokens = r.Tokens }},
		{"fp32-grad-accum", func() { m.FP32GradAccum = r.FP32GradAccum }}, {"scenario", func() { m.Scenario = f.plan.scenario }},
		{"latency-target-ms", func() { m.TPOTTargetMS = f.plan.latencyTargetMS }}, {"tpot-target-ms", func() { m.TPOTTargetMS = f.plan.tpotTargetMS }},
		{"ttft-target-ms", func() { m.TTFTTargetMS = f.plan.ttftTargetMS }},
		{"engine", func() { m.Engine = string(r.Engine) }}, {"memory-headroom", func() { m.MemoryHeadroom = r.MemoryHeadroom }},
		{"max-model-len", func() { m.MaxModelLen = r.MaxModelLen }}, {"max-num-batched-tokens", func() { m.MaxNumBatchedTokens = r.MaxNumBatchedTokens }},
		{"max-num-seqs", func() { m.MaxNumSeqs = r.MaxNumSeqs }},
	} {
		if fs.Changed(c.flag) || (c.flag == "mode" && m.Mode == "") {
			c.set()
		}
	}
	if m.Precision == "" && req.Resources.Precision != "" {
		m.Precision = string(req.Resources.Precision)
	}
	req.Model = m
	return nil
}

// modelRequest reads --model as a config.json path when a file exists
// there (sent inline), else as a built-in model name.
func modelRequest(ref string) (*api.ModelRequest, error) {
	data, err := os.ReadFile(ref)
	switch {
	case err == nil:
		name := strings.TrimSuffix(filepath.Base(ref), filepath.Ext(ref))
		if _, err := model.Parse(name, data); err != nil {
			return nil, fmt.Errorf("--model %s: %w", ref, err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%w: --model %s: %v", gpufleet.ErrInvalid, ref, err)
		}
		return &api.ModelRequest{Config: cfg}, nil
	case errors.Is(err, fs.ErrNotExist):
		if _, berr := model.Builtin(ref); berr != nil {
			return nil, fmt.Errorf("--model %q is neither a file nor a built-in model: %w", ref, berr)
		}
		return &api.ModelRequest{Name: ref}, nil
	}
	return nil, fmt.Errorf("--model: %w", err)
}

func mergeKV(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// parseLabelFlags reads -l values, each KEY=VALUE pairs separated by
// commas (gpufleet.ParseLabels); a key given twice, in one value or two,
// is refused.
func parseLabelFlags(vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		m, err := gpufleet.ParseLabels(v)
		if err != nil {
			return nil, err
		}
		for k, val := range m {
			if _, dup := out[k]; dup {
				return nil, fmt.Errorf("%w: label key %s given twice", gpufleet.ErrInvalid, gpufleet.Quote(k))
			}
			out[k] = val
		}
	}
	return out, nil
}

// selectorFlag registers -l/--selector: a label selector, repeatable (the
// selectors given must all hold).
func selectorFlag(fs *pflag.FlagSet, dst *[]string, what string) {
	fs.StringArrayVarP(dst, "selector", "l", nil, what+" whose labels match this selector: k=v, k==v, k!=v, k, !k, 'k in (a,b)', 'k notin (a,b)', comma-separated (all must hold; repeatable)")
}

// parseSelectorFlag reads the -l values as one selector.
func parseSelectorFlag(vals []string) (gpufleet.LabelSelector, error) {
	sel, err := gpufleet.ParseLabelSelector(strings.Join(vals, ","))
	if err != nil {
		return nil, gpufleet.InField("--selector", err)
	}
	return sel, nil
}

// readJobFile opens and parses a job file ("-": stdin).
func readJobFile(e *env, path string) (api.SubmitRequest, error) {
	if path == "-" {
		return parseJobFile(e.stdin, "stdin")
	}
	f, err := os.Open(path)
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("job file: %w", err)
	}
	defer f.Close()
	return parseJobFile(f, path)
}

func newSubmitCmd(c *clientEnv) *cobra.Command {
	var f submitFlags
	cmd := &cobra.Command{
		Use:   "submit [FILE] [flags] [-- COMMAND ARGS...]",
		Short: "Submit a job from a job file, flags, or both",
		Long: `Submit a job. FILE is a YAML or JSON job file (docs/JOBS.md; - reads stdin);
flags given on the command line override it, and the command after -- replaces
its command. With --model the job is admitted through the planner: a request
smaller than the model needs is a warning, or with --strict an error.

Prints the job id; warnings go to stderr. -o json prints the job.`,
		Example: `  gpufleet submit --gpus 8 --gpu-model h100-sxm-80gb --priority training -- torchrun train.py
  gpufleet submit examples/jobs/train-gang.yaml --time-limit 12h
  gpufleet submit --gpus 1 --sharing mig:1g.18gb --priority interactive -- jupyter lab
  gpufleet submit --gpus 2 --model llama-3.1-70b --precision fp8 --strict -- vllm serve`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fileArgs, command := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				fileArgs, command = args[:dash], args[dash:]
			}
			req, err := f.request(c.env, cmd.Flags(), fileArgs, command)
			if err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			resp, err := cl.SubmitJob(cmd.Context(), req)
			var refused *api.Error
			if err != nil && c.output == outputJSON && errors.As(err, &refused) && refused.Explanation != nil {
				// The refusal as data, as the API sent it; the message
				// goes to stderr as for any error.
				if werr := writeJSON(c.stdout, api.ErrorBody{Error: refused.Message, Code: refused.Code,
					ReasonCode: refused.Explanation.Code, Explanation: refused.Explanation}); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			for _, w := range resp.Warnings {
				fmt.Fprintf(c.stderr, "warning: %s\n", w)
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, resp)
			}
			_, err = fmt.Fprintln(c.stdout, resp.ID)
			return err
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

func newJobsCmd(c *clientEnv) *cobra.Command {
	var (
		q     api.JobQuery
		state string
		watch bool
	)
	var selector []string
	cmd := &cobra.Command{
		Use:   "jobs [--all] [--team T] [--state S,S] [-l SELECTOR] [--watch]",
		Short: "List jobs (active ones; --all adds finished)",
		Example: `  gpufleet jobs -l sweep=lr-7,run!=3
  gpufleet jobs --all -l 'team in (nlp,cv)' -o name
  gpufleet jobs -o jsonpath='{range [*]}{.id}{"\t"}{.labels}{"\n"}{end}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if q.Selector, err = parseSelectorFlag(selector); err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			for _, s := range splitComma(state) {
				q.States = append(q.States, gpufleet.JobState(s))
			}
			render := func(ctx context.Context) error {
				jobs, err := cl.AllJobs(ctx, q)
				if err != nil {
					return err
				}
				if c.output == outputJSON {
					return writeJSON(c.stdout, jobs)
				}
				return c.printJobs(jobs)
			}
			return c.maybeWatch(cmd.Context(), cl, watch, render)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&q.All, "all", false, "include finished jobs")
	fs.StringVar(&q.Team, "team", "", "only this team's jobs")
	fs.StringVar(&state, "state", "", "only these states, comma-separated")
	selectorFlag(fs, &selector, "only jobs")
	fs.BoolVarP(&watch, "watch", "w", false, "print again whenever something changes")
	return cmd
}

func (c *clientEnv) printJobs(jobs []gpufleet.Job) error {
	cols := []string{"ID", "NAME", "TEAM", "STATE", "PRIORITY", "GPUS", "SUBMITTED"}
	if c.output == outputWide {
		cols = append(cols, "STARTED", "MODELS", "SHARING", "RETRIES", "NODES", "LABELS")
	}
	t := newTable(c.stdout, cols...)
	for _, j := range jobs {
		row := []string{j.ID, orDash(j.Name), j.Team, jobState(j), orDash(string(j.Priority)), gpuCount(j.Resources), c.ago(&j.SubmittedAt)}
		if c.output == outputWide {
			row = append(row, c.ago(j.StartedAt), orDash(strings.Join(j.Resources.GPUModels, ",")), orDash(sharingText(j.Resources.Sharing)),
				fmt.Sprintf("%d/%d", j.Retries.Used, j.Retries.Max), attemptNodes(j), kvList(j.Labels))
		}
		t.row(row...)
	}
	return t.flush()
}

func jobState(j gpufleet.Job) string {
	if j.CancelRequested && !j.State.Terminal() {
		return string(j.State) + " (cancelling)"
	}
	return string(j.State)
}

func gpuCount(r gpufleet.Resources) string {
	s := strconv.Itoa(r.GPUs)
	if r.Nodes > 1 {
		s += fmt.Sprintf(" on %d nodes", r.Nodes)
	}
	return s
}

// attemptNodes names the nodes of the job's latest attempt.
func attemptNodes(j gpufleet.Job) string {
	if len(j.Attempts) == 0 {
		return "-"
	}
	a := j.Attempts[len(j.Attempts)-1]
	var names []string
	for _, n := range a.Nodes {
		names = append(names, n.Name)
	}
	if len(names) == 0 && a.Node != "" {
		names = []string{a.Node}
	}
	return orDash(strings.Join(names, ","))
}

func newJobCmd(c *clientEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "job ID",
		Short: "Show a job: request, state, queue position and attempts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			j, err := cl.Job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, j)
			}
			return c.printJob(j)
		},
	}
}

func (c *clientEnv) printJob(j gpufleet.Job) error {
	w := c.stdout
	kv := newTable(w, "FIELD", "VALUE")
	r := j.Resources
	res := []string{gpuCount(r) + " GPUs"}
	if len(r.GPUModels) > 0 {
		res = append(res, strings.Join(r.GPUModels, "|"))
	}
	if r.GPUMemoryMinBytes > 0 {
		res = append(res, ">="+r.GPUMemoryMinBytes.String())
	}
	if !r.MinComputeCapability.IsZero() {
		res = append(res, "cc>="+r.MinComputeCapability.String())
	}
	for _, s := range []string{sharingText(r.Sharing), string(r.Precision), string(r.Interconnect)} {
		if s != "" {
			res = append(res, s)
		}
	}
	if len(r.NodeSelector) > 0 {
		res = append(res, kvList(r.NodeSelector))
	}
	if r.Stack != "" {
		res = append(res, "stack "+r.Stack)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Requires)) {
		res = append(res, requireText(k, r.Requires[k]))
	}
	if r.Isolation != "" {
		res = append(res, "isolation "+string(r.Isolation))
	}
	if r.Overhead != nil {
		res = append(res, "overhead "+r.Overhead.String())
	}
	if r.Prefer != "" {
		res = append(res, "prefer "+string(r.Prefer))
	}
	rows := [][2]string{
		{"id", j.ID}, {"name", orDash(j.Name)}, {"team", j.Team}, {"labels", kvList(j.Labels)}, {"state", jobState(j)}, {"priority", orDash(string(j.Priority))},
		{"resources", strings.Join(res, ", ")}, {"command", orDash(strings.Join(j.Command, " "))},
		{"submitted", c.ago(&j.SubmittedAt)}, {"started", c.ago(j.StartedAt)}, {"finished", c.ago(j.FinishedAt)},
		{"time limit", seconds(j.TimeLimitS)}, {"estimate", seconds(j.EstimateS)},
		{"retries", j.Retries.String()},
		{"interruptions", fmt.Sprintf("%d (preemption, drain, node loss: not counted against retries)", j.Interruptions)},
		{"preemptible", strconv.FormatBool(j.Preemptible)},
		{"stops", gpufleet.StopProtocol(j.StopSignal)},
	}
	if j.Container() {
		img := j.Image + " (pull " + string(j.ImagePullPolicy.Or()) + ")"
		for _, m := range j.Mounts {
			img += ", mount " + m.String()
		}
		if j.ShmSize > 0 {
			img += fmt.Sprintf(", shm %.1f GiB", float64(j.ShmSize)/(1<<30))
		}
		rows = append(rows, [2]string{"image", img})
	}
	if j.Work != nil {
		rows = append(rows, [2]string{"work counter", fmt.Sprintf("%s, in %s", j.Work.Metric, j.Work.UnitName())})
	}
	if len(r.JoulesPerUnit) > 0 {
		var per []string
		for _, m := range slices.Sorted(maps.Keys(r.JoulesPerUnit)) {
			per = append(per, fmt.Sprintf("%s %s J", m, sig3(r.JoulesPerUnit[m])))
		}
		rows = append(rows, [2]string{"energy per unit", strings.Join(per, ", ")})
	}
	if j.Queue != nil {
		rows = append(rows, [2]string{"queue", fmt.Sprintf("position %d (team %d), start %s (confidence %s): %s",
			j.Queue.Position, j.Queue.TeamPosition, c.eta(*j.Queue), confidence(*j.Queue), j.Queue.Reason)})
		if e := j.Queue.Explanation; e != nil {
			if why := explanationCounts(e); why != "" {
				rows = append(rows, [2]string{"why", why})
			}
		}
	}
	for _, row := range rows {
		kv.row(row[0], row[1])
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(j.Attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "ATTEMPT", "STATE", "NODES", "GPUS", "ISOLATION", "STARTED", "EXIT", "ENERGY", "WORK", "REASON")
	for _, a := range j.Attempts {
		exit := "-"
		if a.ExitCode != nil {
			exit = gpufleet.ExitText(*a.ExitCode)
		}
		gpus := len(a.GPUs)
		for i, n := range a.Nodes {
			if i > 0 {
				gpus += len(n.GPUs)
			}
		}
		work := "-"
		if a.Work != nil {
			work = sig3(*a.Work) + " " + j.Work.UnitName()
		}
		iso := "-"
		if a.Mechanism != nil {
			iso = a.Mechanism.Name + " " + a.Mechanism.Short()
		}
		t.row(a.ID, string(a.State), attemptNodes(gpufleet.Job{Attempts: []gpufleet.Attempt{a}}), strconv.Itoa(gpus), iso,
			c.ago(a.StartedAt), exit, energyText(a.EnergyJoules), work, orDash(a.Reason))
	}
	return t.flush()
}

func newCancelCmd(c *clientEnv) *cobra.Command {
	var name, team string
	var states, selector []string
	cmd := &cobra.Command{
		Use:   "cancel ID [ID...] | -l SELECTOR | --name NAME [--state queued|running] [--team T]",
		Short: "Cancel jobs by id or by selector (each turns cancelled once its attempts have stopped)",
		Long: `Cancel the jobs named by id, or those a selector picks among the active
(queued, scheduled and running) jobs you can see: -l (a label selector, as
kubectl's: the server cancels what it picks, POST /api/v1/jobs/cancel),
--name (exact), --state (queued or running; repeatable) and, for admins,
--team. A member's selector picks only its own team's jobs. Every job is
tried; the ones that could not be cancelled are reported on stderr and the
command exits 1. With -o json one id prints the job, several (or a
selector) print an array.`,
		Example: `  gpufleet cancel j-01m8z5zcptp1x4sq
  gpufleet cancel j-01m8z5zcptp1x4sq j-01m8z5zcrsrdnwxf
  gpufleet cancel -l sweep=lr-7,run!=3
  gpufleet cancel --name sweep-7 --state queued`,
		RunE: func(cmd *cobra.Command, args []string) error {
			bySelector := cmd.Flags().Changed("selector")
			picking := name != "" || len(states) > 0 || team != "" || bySelector
			if len(args) > 0 && picking {
				return usageErr("cancel: give ids or a selector (-l, --name, --state, --team), not both")
			}
			if len(args) == 0 && !picking {
				return usageErr("cancel: give job ids, or a selector (-l, --name, --state, --team)")
			}
			sel, err := parseSelectorFlag(selector)
			if err != nil {
				return err
			}
			if bySelector && sel.Empty() {
				return usageErr("--selector: empty: it would cancel every job (give ids, or a selector with a requirement)")
			}
			qStates, err := cancelStates(states)
			if err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			if bySelector && name == "" {
				list, err := cl.CancelJobs(cmd.Context(), api.JobQuery{Selector: sel, Team: team, States: qStates})
				if err != nil {
					return err
				}
				if len(list.Jobs) == 0 {
					fmt.Fprintln(c.stderr, "no active job matches")
				}
				return c.printCancelled(list.Jobs, false)
			}
			ids := args
			if picking {
				if ids, err = selectJobs(cmd.Context(), cl, api.JobQuery{Team: team, States: qStates, Selector: sel}, name); err != nil {
					return err
				}
				if len(ids) == 0 {
					fmt.Fprintln(c.stderr, "no active job matches")
					return nil
				}
			}
			var done []gpufleet.Job
			failed := 0
			for _, id := range ids {
				j, err := cl.CancelJob(cmd.Context(), id)
				if err != nil {
					failed++
					fmt.Fprintf(c.stderr, "gpufleet: cancel %s: %v\n", id, err)
					continue
				}
				done = append(done, j)
			}
			if err := c.printCancelled(done, len(args) == 1 && len(done) == 1); err != nil {
				return err
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("cancel: %d of %d job(s) not cancelled", failed, len(ids))}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	selectorFlag(fs, &selector, "cancel the active jobs")
	fs.StringVar(&name, "name", "", "cancel the active jobs with this name")
	fs.StringArrayVar(&states, "state", nil, "cancel only jobs in this state: queued or running (repeatable)")
	fs.StringVar(&team, "team", "", "cancel only this team's jobs (admins)")
	return cmd
}

// printCancelled prints the jobs a cancel reached: a line each, or with
// -o json the job (one) or an array.
func (c *clientEnv) printCancelled(jobs []gpufleet.Job, one bool) error {
	if c.output == outputJSON {
		if one {
			return writeJSON(c.stdout, jobs[0])
		}
		if jobs == nil {
			jobs = []gpufleet.Job{}
		}
		return writeJSON(c.stdout, jobs)
	}
	if len(jobs) == 0 {
		return nil
	}
	for _, j := range jobs {
		if _, err := fmt.Fprintf(c.stdout, "job %s: %s\n", j.ID, jobState(j)); err != nil {
			return err
		}
	}
	return nil
}

// cancelStates reads cancel's --state values: queued, or running (which
// takes scheduled jobs too).
func cancelStates(states []string) ([]gpufleet.JobState, error) {
	var out []gpufleet.JobState
	for _, s := range states {
		switch st := gpufleet.JobState(s); st {
		case gpufleet.JobQueued:
			out = append(out, st)
		case gpufleet.JobRunning:
			out = append(out, gpufleet.JobScheduled, gpufleet.JobRunning)
		default:
			return nil, usageErr("--state %s: expected queued or running", gpufleet.Quote(s))
		}
	}
	return out, nil
}

// selectJobs lists the ids of the active jobs q picks with the given name
// (any when empty), not already cancelling.
func selectJobs(ctx context.Context, cl *api.Client, q api.JobQuery, name string) ([]string, error) {
	jobs, err := cl.AllJobs(ctx, q)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, j := range jobs {
		if (name == "" || j.Name == name) && (q.Team == "" || j.Team == q.Team) && !j.State.Terminal() && !j.CancelRequested {
			ids = append(ids, j.ID)
		}
	}
	return ids, nil
}

func newLogsCmd(c *clientEnv) *cobra.Command {
	var q api.LogQuery
	var since, sinceTime string
	cmd := &cobra.Command{
		Use:   "logs ID [-f] [--previous | --attempt ATTEMPT] [--tail N] [--since 10m | --since-time T]",
		Short: "Print a job's log: its latest attempt's, the previous one's, or any attempt's",
		Long: `Print a job's log. By default its latest attempt's; --previous reads the
attempt before it (the one a failover, drain or preemption stopped), and
--attempt any attempt of the job by id (gpufleet job ID lists them). --tail N
prints only the last N lines; --since 10m (or --since-time, RFC 3339) only
the lines the server received in that time (it times what the agents ship,
every second); -f keeps printing until the attempt ends.`,
		Example: `  gpufleet logs j-01m8z5zcptp1x4sq -f
  gpufleet logs j-01m8z5zcptp1x4sq --previous --tail 50
  gpufleet logs j-01m8z5zcptp1x4sq --since 15m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if since != "" {
				if q.Since, err = gpufleet.ParseDuration(since); err != nil {
					return usageErr("--since %q: expected a duration like 10m, 2h or 1d", since)
				}
			}
			if sinceTime != "" {
				if q.SinceTime, err = time.Parse(time.RFC3339Nano, sinceTime); err != nil {
					return usageErr("--since-time %q: expected an RFC 3339 time like 2026-12-04T10:00:00Z", sinceTime)
				}
			}
			if err := q.Validate(); err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			return cl.Logs(cmd.Context(), args[0], q, c.stdout)
		},
	}
	fs := cmd.Flags()
	fs.BoolVarP(&q.Follow, "follow", "f", false, "keep printing until the attempt ends")
	fs.BoolVarP(&q.Previous, "previous", "p", false, "the attempt before the latest (stopped by a failover, drain or preemption)")
	fs.StringVar(&q.Attempt, "attempt", "", "an attempt of the job, by id")
	fs.IntVar(&q.Tail, "tail", 0, "only the last N lines")
	fs.StringVar(&since, "since", "", "only lines received in this last stretch (10m, 2h, 1d)")
	fs.StringVar(&sinceTime, "since-time", "", "only lines received at or after this RFC 3339 time")
	cmd.MarkFlagsMutuallyExclusive("since", "since-time")
	return cmd
}

func newQueueCmd(c *clientEnv) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "queue [--watch]",
		Short: "Show the queue: positions, why each job waits, and when it should start",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			return c.maybeWatch(cmd.Context(), cl, watch, func(ctx context.Context) error {
				q, err := cl.Queue(ctx)
				if err != nil {
					return err
				}
				if c.output == outputJSON {
					return writeJSON(c.stdout, q)
				}
				return c.printQueue(q)
			})
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again whenever something changes")
	return cmd
}

func (c *clientEnv) printQueue(q []gpufleet.QueueEntry) error {
	cols := []string{"POSITION", "TEAM POS", "JOB", "NAME", "TEAM", "PRIORITY", "GPUS", "REASON", "ETA", "CONFIDENCE", "RUN ESTIMATE"}
	if c.output == outputWide {
		cols = append(cols, "REASON CODE", "ESTIMATED START", "ESTIMATED START P90", "NODES")
	}
	t := newTable(c.stdout, cols...)
	for _, e := range q {
		gpus := "-"
		if e.GPUs > 0 {
			gpus = strconv.Itoa(e.GPUs)
		}
		row := []string{strconv.Itoa(e.Position), strconv.Itoa(e.TeamPosition), e.ID, orDash(e.Name), e.Team, orDash(string(e.Priority)), gpus,
			orDash(e.Reason), c.eta(e), confidence(e), runEstimate(e.Estimate)}
		if c.output == outputWide {
			stamp := func(t *time.Time) string {
				if t == nil {
					return "-"
				}
				return t.UTC().Format(time.RFC3339)
			}
			nodes := "-"
			if e.Explanation != nil && e.Explanation.NodesEvaluated > 0 {
				nodes = explanationCounts(e.Explanation)
			}
			row = append(row, orDash(e.ReasonCode), stamp(e.EstimatedStart), stamp(e.EstimatedStartP90), nodes)
		}
		t.row(row...)
	}
	return t.flush()
}

// maybeWatch renders once, and with watch again after every change the
// event stream reports (at most twice a second) until ctx is done. Servers
// that do not stream events are polled every 2s.
func (c *clientEnv) maybeWatch(ctx context.Context, cl *api.Client, watch bool, render func(context.Context) error) error {
	if err := render(ctx); err != nil || !watch {
		return err
	}
	changed := make(chan struct{}, 1)
	errc := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		errc <- cl.Watch(wctx, 0, func(gpufleet.Event) error {
			select {
			case changed <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	var poll <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if !errors.Is(err, gpufleet.ErrUnsupported) {
				return err
			}
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			poll, errc = t.C, nil
			continue
		case <-changed:
		case <-poll:
		}
		if c.output != outputJSON {
			fmt.Fprintf(c.stdout, "\n-- %s\n", c.now().Format("15:04:05"))
		}
		if err := render(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sharingText is a job's sharing for a table: empty when exclusive.
func sharingText(s gpufleet.Sharing) string {
	if s.IsZero() {
		return ""
	}
	return s.String()
}

// parseRequires reads --require values: a component name, then its
// constraint ("cuda>=12.4", "torch=2.5", "nccl>=2.21,<2.23"). A single
// "=" reads as the bare version (the same leading numbers).
func parseRequires(in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range in {
		i := strings.IndexAny(s, "<>=!")
		if i <= 0 {
			return nil, fmt.Errorf("%w: %s: expected COMPONENT then a constraint, such as cuda>=12.4", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		name, con := strings.TrimSpace(s[:i]), s[i:]
		if strings.HasPrefix(con, "=") && !strings.HasPrefix(con, "==") {
			con = con[1:]
		}
		out[name] = con
	}
	return out, nil
}

// requireText writes a requirement as --require takes it.
func requireText(component, constraint string) string {
	if strings.IndexAny(constraint, "<>=!") == 0 {
		return component + constraint
	}
	return component + "=" + constraint
}

// explanationCounts writes an explanation's counts for people: "3 nodes
// evaluated; filtered: selector 1, overhead 2; exhausted gpus (needs 8,
// most 0)", then what holds the job as data ("behind job j1 (position
// 1)"); "" when it has neither.
func explanationCounts(e *gpufleet.Explanation) string {
	var parts []string
	if e.NodesEvaluated > 0 {
		parts = append(parts, fmt.Sprintf("%d nodes evaluated", e.NodesEvaluated))
	}
	if len(e.NodesFiltered) > 0 {
		f := make([]string, len(e.NodesFiltered))
		for i, c := range e.NodesFiltered {
			f[i] = fmt.Sprintf("%s %d", c.Code, c.Nodes)
		}
		parts = append(parts, "filtered: "+strings.Join(f, ", "))
	}
	switch e.Exhausted {
	case "":
	case gpufleet.DimRackPower:
		if e.Rack != nil {
			parts = append(parts, fmt.Sprintf("exhausted rack_power (rack %s)", e.Rack.Rack))
		} else {
			parts = append(parts, "exhausted rack_power")
		}
	case gpufleet.DimQuota:
		parts = append(parts, "exhausted quota")
	default:
		parts = append(parts, fmt.Sprintf("exhausted %s (needs %d, most %d)", e.Exhausted, e.Need, e.Most))
	}
	return strings.Join(append(parts, explanationHolds(e)...), "; ")
}

// explanationHolds writes the data of the reasons that are not about
// nodes, one part each: the job it waits behind, the reservation, the
// victims, the slower model, the stack, the limits reached.
func explanationHolds(e *gpufleet.Explanation) []string {
	var parts []string
	if b := e.Blocker; b != nil {
		parts = append(parts, fmt.Sprintf("behind job %s (position %d)", b.Job, b.Position))
	}
	if r := e.Reservation; r != nil {
		p := fmt.Sprintf("reservation of job %s at %s", r.Job, r.Start.UTC().Format(time.RFC3339))
		if r.EstimateS > 0 {
			p += fmt.Sprintf(" (its estimate %s)", time.Duration(r.EstimateS*float64(time.Second)).Round(time.Second))
		}
		parts = append(parts, p)
	}
	if p := e.Preemption; p != nil {
		parts = append(parts, fmt.Sprintf("victims %d (grace up to %s)", p.Victims, time.Duration(p.GraceS*float64(time.Second)).Round(time.Second)))
	}
	if s := e.Slower; s != nil {
		p := "slower model " + s.Model + " has room"
		if s.Slowdown > 0 {
			p += fmt.Sprintf(" (%.1fx slower, taken in %s)", s.Slowdown, time.Duration(s.TakesInS*float64(time.Second)))
		}
		parts = append(parts, p)
	}
	if s := e.Stack; s != nil {
		switch {
		case s.Invalid != "":
			parts = append(parts, "stack: "+s.Invalid+" unreadable")
		case s.Unknown:
			parts = append(parts, "stack "+s.Stack+" unknown")
		default:
			parts = append(parts, fmt.Sprintf("stack: node %s lacks %s", s.Node, s.Unmet))
		}
	}
	if e.CycleLimit > 0 {
		parts = append(parts, fmt.Sprintf("cycle limit %d", e.CycleLimit))
	}
	if e.SpareHeld > 0 {
		parts = append(parts, fmt.Sprintf("spare held %d GPUs", e.SpareHeld))
	}
	if e.SearchLimit > 0 {
		parts = append(parts, fmt.Sprintf("preemption search limit %d", e.SearchLimit))
	}
	return parts
}
