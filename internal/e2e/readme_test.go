package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// walkStep is one command of the README's walkthrough: a shell line (its
// continuations joined) and the exit statuses its comment allows.
type walkStep struct {
	line  int // in README.md
	cmd   string
	exits []int
	// dev is true for a `gpufleet dev` line: the test runs the fleet itself.
	dev bool
}

var (
	exitRe  = regexp.MustCompile(`#\s*exit (\d+)`)       // "# exit 1: validation failed"
	exitsRe = regexp.MustCompile(`#\s*exits (\d+) on\b`) // "# exits 1 on a high finding": 0 or 1
)

// readmeWalkthrough reads the sh blocks of README.md from "## Run it" to
// "## Test", in order. Blocks that need root (sudo: podman) are left out,
// with a note.
func readmeWalkthrough(t *testing.T) (steps []walkStep, skipped []string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var (
		in, started bool
		block       []walkStep
		blockAt     int
		pending     string
		pendingAt   int
	)
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "## Run it"):
			started = true
			continue
		case started && strings.HasPrefix(l, "## Test"):
			return steps, skipped
		case !started:
			continue
		case !in && strings.HasPrefix(l, "```sh"):
			in, block, blockAt = true, nil, i+1
			continue
		case in && strings.HasPrefix(l, "```"):
			in = false
			if strings.Contains(strings.Join(cmds(block), "\n"), "sudo ") {
				skipped = append(skipped, fmt.Sprintf("README.md:%d: needs root (sudo)", blockAt))
				continue
			}
			steps = append(steps, block...)
			continue
		case !in:
			continue
		}
		s := strings.TrimSpace(l)
		if pending == "" && (s == "" || strings.HasPrefix(s, "#")) {
			continue
		}
		if pending == "" {
			pendingAt = i + 1
		}
		if strings.HasSuffix(s, `\`) {
			pending += strings.TrimSuffix(s, `\`) + " "
			continue
		}
		cmd := pending + s
		pending = ""
		st := walkStep{line: pendingAt, cmd: cmd, exits: []int{0}, dev: strings.HasPrefix(cmd, "gpufleet dev ")}
		if m := exitRe.FindStringSubmatch(cmd); m != nil {
			n, _ := strconv.Atoi(m[1])
			st.exits = []int{n}
		} else if m := exitsRe.FindStringSubmatch(cmd); m != nil {
			n, _ := strconv.Atoi(m[1])
			st.exits = []int{0, n}
		}
		block = append(block, st)
	}
	t.Fatal("README.md: no ## Test section after ## Run it")
	return nil, nil
}

func cmds(steps []walkStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.cmd)
	}
	return out
}

// TestREADMEWalkthrough runs the README's walkthrough in order, as a new
// user would in a shell: each `gpufleet dev` line starts the fleet (the one
// before it stopped, as with Ctrl-C), every other line runs in one bash
// session per fleet with the contexts dev writes, and each must exit as its
// comment says (0 unless "# exit N") within the walkthrough's time: a hang
// names the line it hangs on.
func TestREADMEWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpufleet dev")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	steps, skipped := readmeWalkthrough(t)
	for _, s := range skipped {
		t.Logf("left out: %s", s)
	}
	if len(steps) < 40 || !steps[0].dev {
		t.Fatalf("%d steps, the first %q: the walkthrough should start with gpufleet dev", len(steps), steps[0].cmd)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	work := filepath.Join(home, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// The walkthrough runs from a checkout: $PWD/examples/... must resolve.
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "GPUFLEET_CONFIG=" + filepath.Join(home, "config.yaml"),
		"PATH=" + filepath.Dir(binary(t)) + ":" + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "GPUFLEET_") && k != "HOME" && k != "PATH" {
			env = append(env, kv)
		}
	}
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for i := 0; i < len(steps); {
		dev := steps[i]
		if stop != nil {
			stop()
		}
		stop = startWalkDev(t, dev, home, env)
		j := i + 1
		for j < len(steps) && !steps[j].dev {
			j++
		}
		runWalkSegment(t, steps[i+1:j], work, env)
		i = j
	}
}

// startWalkDev starts the `gpufleet dev` of step s on a free port and a
// data directory of its own under home, waits for its dev.json (written
// once every node joined) and returns how to stop it as Ctrl-C does.
func startWalkDev(t *testing.T, s walkStep, home string, env []string) func() {
	t.Helper()
	args := strings.Fields(strings.TrimPrefix(s.cmd, "gpufleet "))
	dir := filepath.Join(home, fmt.Sprintf("dev-%d", s.line))
	for k := range args {
		if args[k] == "--data-dir" && k+1 < len(args) {
			args[k+1] = dir
		}
	}
	args = append(args, "--listen", "127.0.0.1:0")
	var out bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("README.md:%d: gpufleet dev did not stop within 30 s of Ctrl-C", s.line)
			cmd.Process.Kill()
			<-exited
		}
		for _, pid := range processesUnder(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var st devProc
		data, err := os.ReadFile(filepath.Join(dir, "dev.json"))
		if err == nil && json.Unmarshal(data, &st) == nil && st.APIURL != "" {
			break
		}
		select {
		case <-exited:
			t.Fatalf("README.md:%d: %s exited:\n%s", s.line, s.cmd, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("README.md:%d: %s: no dev.json within 90 s:\n%s", s.line, s.cmd, out.String())
		}
	}
	t.Logf("README.md:%d: %s: running", s.line, s.cmd)
	return stop
}

// walkSegmentTimeout bounds one fleet's part of the walkthrough: its
// longest steps are a 30 s log follow and a workload bench of 30 s a
// model.
const walkSegmentTimeout = 6 * time.Minute

// runWalkSegment runs steps in one bash session, in order, each checked
// against the exits its comment allows.
func runWalkSegment(t *testing.T, steps []walkStep, work string, env []string) {
	t.Helper()
	var script strings.Builder
	for k, s := range steps {
		var allowed []string
		for _, e := range s.exits {
			allowed = append(allowed, strconv.Itoa(e))
		}
		fmt.Fprintf(&script, "echo '::: %d'\n{ %s\n} </dev/null\nrc=$?\ncase $rc in %s) ;; *) echo \"::: %d exited $rc\"; exit 97 ;; esac\n",
			k, s.cmd, strings.Join(allowed, "|"), k)
	}
	ctx, cancel := context.WithTimeout(t.Context(), walkSegmentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--norc", "--noprofile")
	cmd.Dir, cmd.Env, cmd.Stdin = work, env, strings.NewReader(script.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	// Which step ran last, and what each printed.
	last, failed := -1, -1
	var log strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		var k, rc int
		if n, _ := fmt.Sscanf(l, "::: %d exited %d", &k, &rc); n == 2 {
			failed = k
			continue
		}
		if n, _ := fmt.Sscanf(l, "::: %d", &k); n == 1 {
			last = k
			fmt.Fprintf(&log, "$ %s\n", steps[k].cmd)
			continue
		}
		fmt.Fprintf(&log, "  %s\n", l)
	}
	switch {
	case ctx.Err() != nil && last >= 0:
		t.Fatalf("README.md:%d: %s: still running after the walkthrough's %s (a hang)\n%s", steps[last].line, steps[last].cmd, walkSegmentTimeout, log.String())
	case failed >= 0:
		t.Fatalf("README.md:%d: %s: exited otherwise than its comment says (allowed %v)\n%s", steps[failed].line, steps[failed].cmd, steps[failed].exits, log.String())
	case err != nil:
		t.Fatalf("walkthrough: %v\n%s", err, log.String())
	case last != len(steps)-1:
		t.Fatalf("walkthrough stopped after step %d of %d\n%s", last+1, len(steps), log.String())
	}
	t.Logf("%d steps passed\n%s", len(steps), log.String())
}
