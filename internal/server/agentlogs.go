package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// AgentLog takes a chunk of an attempt's log from the agent running it.
// The first node's log is the attempt's log (what `gpufleet logs` shows);
// other nodes of a multi-node attempt keep theirs beside it as
// ATTEMPT.NODE.log. A chunk overlapping what is held is trimmed; one past
// the end is ignored, and the answer tells the agent where to resume.
func (s *Server) AgentLog(ctx context.Context, p api.Principal, attempt string, offset int64, data io.Reader) (int64, error) {
	if p.Node == "" {
		return 0, fmt.Errorf("%w: only agents ship logs", api.ErrForbidden)
	}
	if s.cfg.LogDir == "" {
		return 0, fmt.Errorf("%w: this server keeps no logs", gpufleet.ErrUnsupported)
	}
	rec, err := s.st.Attempt(ctx, attempt)
	if err != nil {
		return 0, err
	}
	i := slices.IndexFunc(rec.Nodes, func(n gpufleet.AttemptNode) bool { return n.Name == p.Node })
	if i < 0 {
		return 0, fmt.Errorf("%w: attempt %s does not run on node %s", api.ErrForbidden, attempt, p.Node)
	}
	path := s.logPath(attempt)
	if i > 0 {
		path = filepath.Join(s.cfg.LogDir, filepath.Base(attempt)+"."+p.Node+".log")
	}
	s.agentExt.logMu.Lock()
	defer s.agentExt.logMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open log of attempt %s: %w", attempt, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if offset > size {
		return size, nil
	}
	if skip := size - offset; skip > 0 {
		if _, err := io.CopyN(io.Discard, data, skip); err != nil {
			if errors.Is(err, io.EOF) {
				return size, nil
			}
			return size, fmt.Errorf("%w: log chunk: %v", gpufleet.ErrInvalid, err)
		}
	}
	n, err := io.Copy(f, data)
	if n > 0 {
		if terr := appendLogTime(path, size, s.now()); terr != nil {
			s.log.Warn("log times not recorded", "attempt", attempt, "err", terr)
		}
	}
	size += n
	if err != nil {
		return size, fmt.Errorf("%w: log chunk: %v", gpufleet.ErrInvalid, err)
	}
	return size, nil
}
