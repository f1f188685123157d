package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/gpufleet/gpufleet"
)

// agentLog takes a chunk of an attempt's log: the raw body is the bytes
// from ?offset= on.
func (h *handler) agentLog(w http.ResponseWriter, r *http.Request, p Principal) error {
	ls, ok := h.agents.(AgentLogService)
	if !ok {
		return fmt.Errorf("%w: this server takes no agent logs", gpufleet.ErrUnsupported)
	}
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil || off < 0 {
		return fmt.Errorf("%w: offset %s: expected a non-negative integer", gpufleet.ErrInvalid, gpufleet.Quote(r.URL.Query().Get("offset")))
	}
	id := r.PathValue("id")
	size, err := ls.AgentLog(r.Context(), p, id, off, r.Body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, LogChunkResponse{AttemptID: id, SizeBytes: size})
}

func (h *handler) faultService() (FaultService, error) {
	fs, ok := h.svc.(FaultService)
	if !ok {
		return nil, fmt.Errorf("%w: this server does not relay faults", gpufleet.ErrUnsupported)
	}
	return fs, nil
}

func (h *handler) injectFault(w http.ResponseWriter, r *http.Request, p Principal) error {
	fs, err := h.faultService()
	if err != nil {
		return err
	}
	var req FaultRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	o, err := fs.InjectFault(r.Context(), p, r.PathValue("name"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, o)
}

func (h *handler) clearFaults(w http.ResponseWriter, r *http.Request, p Principal) error {
	fs, err := h.faultService()
	if err != nil {
		return err
	}
	s := r.URL.Query().Get("gpu")
	gpu, err := strconv.Atoi(s)
	if err != nil || gpu < 0 {
		return fmt.Errorf("%w: gpu %s: expected a GPU index", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	o, err := fs.ClearFaults(r.Context(), p, r.PathValue("name"), gpu)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, o)
}

func (h *handler) replaceNode(w http.ResponseWriter, r *http.Request, p Principal) error {
	rs, ok := h.svc.(NodeReplacer)
	if !ok {
		return fmt.Errorf("%w: this server does not replace nodes", gpufleet.ErrUnsupported)
	}
	jt, err := rs.ReplaceNode(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, jt)
}
