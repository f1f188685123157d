package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction: its keyword, upper-cased, and
// its arguments with continuation lines joined.
type instruction struct {
	line int
	cmd  string
	args string
}

// stage is one FROM and the instructions after it.
type stage struct {
	image, name string
	body        []instruction
}

// parseDockerfile reads a Dockerfile's instructions: comments and blank
// lines dropped (inside a continuation too, as Docker does), lines ending
// in a backslash joined with the next. It is
// enough for deploy/container/Dockerfile (no heredocs, no escape directive).
func parseDockerfile(text string) ([]stage, error) {
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() error {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(s, " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				return fmt.Errorf("line %d: FROM %s", in.line, in.args)
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil // an ARG before the first FROM
			}
			return fmt.Errorf("line %d: %s before FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || trimmed == "" {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(strings.TrimSpace(body) + " ")
			continue
		}
		cur.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", start)
	}
	return stages, flush()
}

// all returns a stage's instructions of one kind.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// releaseSymbol is the variable scripts/release sets with -X.
func releaseSymbol(t *testing.T) string {
	t.Helper()
	script, err := os.ReadFile("../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^symbol=(\S+)$`).FindSubmatch(script)
	if m == nil || !strings.Contains(string(script), `-X $symbol=$version`) {
		t.Fatal("scripts/release: no symbol=... used as -X $symbol=$version")
	}
	return string(m[1])
}

// TestDockerfile: the container image builds the release's binary the way
// scripts/release does and runs it on distroless base (glibc), as the
// Dockerfile's comments and docs/DEPLOY.md say. No Docker daemon is
// reachable from the tests, so this reads the Dockerfile; the image itself
// is not built here.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a builder and the runtime", len(stages))
	}
	build, run := stages[0], stages[1]

	// The builder: Go of the module's release, Debian 12 like the runtime.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil || build.image != "golang:"+string(goVersion[1])+"-bookworm" {
		t.Errorf("builder %s, want golang:%s-bookworm (go.mod's Go, Debian 12 as the runtime)", build.image, goVersion[1])
	}
	if !strings.HasPrefix(run.image, "gcr.io/distroless/base-debian12") {
		t.Errorf("runtime image %s, want gcr.io/distroless/base-debian12 (glibc for the cgo binary)", run.image)
	}

	// The build: cgo, -trimpath, the same -X symbol as scripts/release.
	var goBuild string
	for _, in := range build.all("RUN") {
		if strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	env := strings.Join(slices.Collect(func(yield func(string) bool) {
		for _, in := range build.all("ENV") {
			if !yield(in.args) {
				return
			}
		}
	}), " ")
	symbol := releaseSymbol(t)
	if symbol != "github.com/gpufleet/gpufleet.Version" {
		t.Errorf("scripts/release sets %s", symbol)
	}
	root, err := os.ReadFile("../gpufleet.go")
	if err != nil || !regexp.MustCompile(`(?m)^var Version = `).Match(root) {
		t.Errorf("gpufleet.go has no var Version for -X %s (%v)", symbol, err)
	}
	for _, want := range []string{"-trimpath", "-s -w", "-X " + symbol + "=${VERSION}", "./cmd/gpufleet"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("go build %q lacks %q", goBuild, want)
		}
	}
	if !strings.Contains(env, "CGO_ENABLED=1") {
		t.Errorf("builder ENV %q: no CGO_ENABLED=1 (the NVML backend needs cgo)", env)
	}
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(goBuild)
	if out == nil {
		t.Fatalf("go build %q: no -o", goBuild)
	}

	// The runtime: the built binary copied where ENTRYPOINT runs it.
	var dest string
	for _, in := range run.all("COPY") {
		f := strings.Fields(in.args)
		if slices.Contains(f, "--from="+build.name) && slices.Contains(f, out[1]) {
			dest = f[len(f)-1]
		}
	}
	if dest == "" {
		t.Fatalf("runtime: no COPY --from=%s %s", build.name, out[1])
	}
	var entry, cmd []string
	for _, in := range run.body {
		var into *[]string
		switch in.cmd {
		case "ENTRYPOINT":
			into = &entry
		case "CMD":
			into = &cmd
		default:
			continue
		}
		if err := json.Unmarshal([]byte(in.args), into); err != nil {
			t.Errorf("line %d: %s %s: want the exec (JSON) form: %v", in.line, in.cmd, in.args, err)
		}
	}
	if len(entry) != 1 || entry[0] != dest {
		t.Errorf("ENTRYPOINT %q, want [%q], where the binary is copied", entry, dest)
	}
	if !slices.Equal(cmd, []string{"server"}) {
		t.Errorf("CMD %q, want [server]", cmd)
	}
	if users := run.all("USER"); len(users) == 0 || strings.HasPrefix(users[len(users)-1].args, "0") || users[len(users)-1].args == "root" {
		t.Errorf("runtime USER %v: want a non-root user", users)
	}

	// EXPOSE: the server's port (GPUFLEET_LISTEN) and the agent's metrics (9400).
	var ports []string
	for _, in := range run.all("EXPOSE") {
		ports = append(ports, strings.Fields(in.args)...)
	}
	listen := regexp.MustCompile(`GPUFLEET_LISTEN=:(\d+)`).FindStringSubmatch(strings.Join(slices.Collect(func(yield func(string) bool) {
		for _, in := range run.all("ENV") {
			if !yield(in.args) {
				return
			}
		}
	}), " "))
	if listen == nil {
		t.Fatal("runtime: no ENV GPUFLEET_LISTEN=:PORT (the binary listens on 127.0.0.1 by default)")
	}
	for _, p := range []string{listen[1], "9400"} {
		if !slices.Contains(ports, p) {
			t.Errorf("EXPOSE %v lacks %s", ports, p)
		}
	}
}

// TestParseDockerfile: the parser joins continuations, drops comments and
// refuses what it cannot read.
func TestParseDockerfile(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []stage
		err        bool
	}{
		{
			name: "stages and continuations",
			text: "ARG X=1\n# c\nFROM a AS b\nRUN x \\\n  y\n\nFROM c\nCMD [\"s\"]\n",
			want: []stage{{image: "a", name: "b", body: []instruction{{line: 4, cmd: "RUN", args: "x y"}}}, {image: "c", body: []instruction{{line: 8, cmd: "CMD", args: `["s"]`}}}},
		},
		{name: "instruction before FROM", text: "RUN x\nFROM a\n", err: true},
		{name: "dangling continuation", text: "FROM a\nRUN x \\\n", err: true},
		{name: "odd FROM", text: "FROM a b\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDockerfile(tc.text)
			if tc.err {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
