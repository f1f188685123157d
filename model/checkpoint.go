package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Bounds on what the safetensors readers accept. The format caps a
// header at 100 MB; the largest published indexes hold about a hundred
// thousand tensors (DeepSeek-V3: 91,991) in a few megabytes.
const (
	// MaxSafetensorsHeader bounds one file's JSON header.
	MaxSafetensorsHeader = 64 << 20
	// MaxSafetensorsIndex bounds a model.safetensors.index.json.
	MaxSafetensorsIndex = 64 << 20
	maxTensors          = 1 << 20
	maxCheckpointBytes  = int64(1) << 52 // 4 PiB
)

// SafetensorsIndex is a model.safetensors.index.json: the total size of
// the tensors and the shard holding each.
type SafetensorsIndex struct {
	TotalSize int64             `json:"total_size"`
	WeightMap map[string]string `json:"weight_map"`
}

// Shards returns the shard file names of the index, sorted.
func (x *SafetensorsIndex) Shards() []string {
	set := map[string]bool{}
	for _, s := range x.WeightMap {
		set[s] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// ParseSafetensorsIndex reads a model.safetensors.index.json: its
// metadata.total_size (required, the bytes of every tensor) and its
// weight_map of tensor name to shard file. Names are checked as text and
// a shard must be a plain file name.
func ParseSafetensorsIndex(data []byte) (*SafetensorsIndex, error) {
	if len(data) > MaxSafetensorsIndex {
		return nil, fmt.Errorf("%w: safetensors index: %d bytes, at most %d", gpufleet.ErrInvalid, len(data), MaxSafetensorsIndex)
	}
	var raw struct {
		Metadata struct {
			TotalSize json.Number `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: safetensors index: malformed json: %v", gpufleet.ErrInvalid, err)
	}
	total, err := strconv.ParseFloat(string(raw.Metadata.TotalSize), 64)
	if err != nil || total <= 0 || total > float64(maxCheckpointBytes) || total != float64(int64(total)) {
		return nil, &gpufleet.ValueError{Field: "metadata.total_size", Value: gpufleet.Quote(string(raw.Metadata.TotalSize)), Want: fmt.Sprintf("expected a whole number of bytes from 1 to %d", maxCheckpointBytes)}
	}
	if len(raw.WeightMap) > maxTensors {
		return nil, fmt.Errorf("%w: weight_map: %d tensors, at most %d", gpufleet.ErrInvalid, len(raw.WeightMap), maxTensors)
	}
	for _, name := range slices.Sorted(maps.Keys(raw.WeightMap)) {
		if err := gpufleet.CheckText("weight_map", name, gpufleet.MaxWordLen, false); err != nil {
			return nil, err
		}
		shard := raw.WeightMap[name]
		if err := gpufleet.CheckText("weight_map "+gpufleet.Quote(name), shard, gpufleet.MaxWordLen, false); err != nil {
			return nil, err
		}
		if shard == "" || shard == "." || shard == ".." || strings.ContainsAny(shard, `/\`) {
			return nil, &gpufleet.ValueError{Field: "weight_map " + gpufleet.Quote(name), Value: gpufleet.Quote(shard), Want: "expected a file name next to the index"}
		}
	}
	return &SafetensorsIndex{TotalSize: int64(total), WeightMap: raw.WeightMap}, nil
}

// Tensor is one tensor of a safetensors header.
type Tensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
}

// dtypeBits are the safetensors dtypes and their sizes in bits.
var dtypeBits = map[string]int64{
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

// SafetensorsHeaderLen reads the 8-byte little-endian header length a
// safetensors file starts with and checks it against
// MaxSafetensorsHeader, so that a caller reads only 8 + n bytes.
func SafetensorsHeaderLen(prefix []byte) (int64, error) {
	if len(prefix) < 8 {
		return 0, fmt.Errorf("%w: safetensors header: %d bytes, want the 8-byte length first", gpufleet.ErrInvalid, len(prefix))
	}
	n := binary.LittleEndian.Uint64(prefix[:8])
	if n < 2 || n > MaxSafetensorsHeader {
		return 0, fmt.Errorf("%w: safetensors header: length %d, expected 2 to %d bytes", gpufleet.ErrInvalid, n, MaxSafetensorsHeader)
	}
	return int64(n), nil
}

// ParseSafetensorsHeader reads the header of a safetensors file from the
// file's first bytes (8-byte length, then that much JSON; the tensor data
// after it, if any, is not read): each tensor's dtype, shape and
// data_offsets, whose span must equal the dtype times the shape.
// __metadata__ is skipped. Tensors come back sorted by name.
func ParseSafetensorsHeader(data []byte) ([]Tensor, error) {
	n, err := SafetensorsHeaderLen(data)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) < 8+n {
		return nil, fmt.Errorf("%w: safetensors header: %d bytes of a %d-byte header", gpufleet.ErrInvalid, len(data)-8, n)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("%w: safetensors header: malformed json: %v", gpufleet.ErrInvalid, err)
	}
	if len(raw) > maxTensors {
		return nil, fmt.Errorf("%w: safetensors header: %d tensors, at most %d", gpufleet.ErrInvalid, len(raw), maxTensors)
	}
	out := make([]Tensor, 0, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		if name == "__metadata__" {
			continue
		}
		if err := gpufleet.CheckText("tensor", name, gpufleet.MaxWordLen, false); err != nil {
			return nil, err
		}
		var e struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, fmt.Errorf("%w: tensor %s: %v", gpufleet.ErrInvalid, gpufleet.Quote(name), err)
		}
		bits, ok := dtypeBits[e.DType]
		if !ok {
			return nil, &gpufleet.ValueError{Field: "tensor " + gpufleet.Quote(name) + " dtype", Value: gpufleet.Quote(e.DType), Want: "expected a safetensors dtype (BF16, F16, F32, F8_E4M3, I32, U8, ...)"}
		}
		if len(e.Shape) > 8 {
			return nil, fmt.Errorf("%w: tensor %s: %d dimensions, at most 8", gpufleet.ErrInvalid, gpufleet.Quote(name), len(e.Shape))
		}
		elems := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > maxCheckpointBytes || elems > maxCheckpointBytes/max(d, 1) {
				return nil, fmt.Errorf("%w: tensor %s: shape %v out of range", gpufleet.ErrInvalid, gpufleet.Quote(name), e.Shape)
			}
			elems *= d
		}
		size := (elems*bits + 7) / 8
		if len(e.DataOffsets) != 2 || e.DataOffsets[0] < 0 || e.DataOffsets[1]-e.DataOffsets[0] != size {
			return nil, fmt.Errorf("%w: tensor %s: data_offsets %v do not span the %d bytes of %s %v", gpufleet.ErrInvalid, gpufleet.Quote(name), e.DataOffsets, size, e.DType, e.Shape)
		}
		out = append(out, Tensor{Name: name, DType: e.DType, Shape: e.Shape, Bytes: size})
	}
	return out, nil
}

// Checkpoint is a safetensors checkpoint's weights as the planner uses
// them: the index's total and, when the shards' headers were read, the
// bytes of each tensor placed by the config's module names.
type Checkpoint struct {
	// TotalBytes is the index's metadata.total_size.
	TotalBytes int64 `json:"total_bytes"`
	Tensors    int   `json:"tensors"` // in the weight map
	Shards     int   `json:"shards"`
	// Sized says every tensor of the index had its size from a header;
	// the fields below are then set.
	Sized     bool    `json:"sized"`
	Embedding int64   `json:"embedding,omitempty"`
	Head      int64   `json:"head,omitempty"`
	Dense     []int64 `json:"dense,omitempty"`   // per layer; the final norm and other tensors outside the layers on the last
	Experts   []int64 `json:"experts,omitempty"` // per layer: routed experts
	// ExtraLayers are tensors of layers past the config's (DeepSeek-V3's
	// multi-token-prediction layer), ExtraBytes their size when sized:
	// the planner leaves them out, as Params does.
	ExtraLayers int   `json:"extra_layers,omitempty"`
	ExtraBytes  int64 `json:"extra_bytes,omitempty"`
}

// NewCheckpoint places the index's tensors on the config's layers.
// headers are the tensors read from the shards' headers, nil when none
// were; a tensor of the index without a header entry leaves the
// checkpoint unsized (its total only).
func NewCheckpoint(c *Config, idx *SafetensorsIndex, headers []Tensor) (*Checkpoint, error) {
	ck := &Checkpoint{TotalBytes: idx.TotalSize, Tensors: len(idx.WeightMap), Shards: len(idx.Shards())}
	nm := c.naming()
	sizes := make(map[string]int64, len(headers))
	for _, t := range headers {
		sizes[t.Name] = t.Bytes
	}
	sized := len(headers) > 0
	extra := map[int]bool{}
	dense, experts := make([]int64, c.NumLayers), make([]int64, c.NumLayers)
	var sum int64
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		b, ok := sizes[name]
		if !ok {
			sized = false
		}
		sum += b
		layer := -1
		if rest, ok := strings.CutPrefix(name, nm.layers); ok {
			if i := strings.IndexByte(rest, '.'); i > 0 {
				if n, err := strconv.Atoi(rest[:i]); err == nil && n >= 0 {
					layer = n
				}
			}
		}
		switch {
		case layer >= c.NumLayers:
			extra[layer] = true
			ck.ExtraBytes += b
		case layer >= 0 && strings.Contains(name, ".experts."):
			experts[layer] += b
		case layer >= 0:
			dense[layer] += b
		case strings.HasPrefix(name, nm.embed+"."):
			ck.Embedding += b
		case strings.HasPrefix(name, nm.head+"."):
			ck.Head += b
		case c.NumLayers > 0:
			dense[c.NumLayers-1] += b
		}
	}
	ck.ExtraLayers = len(extra)
	if !sized {
		ck.Embedding, ck.Head, ck.ExtraBytes = 0, 0, 0
		return ck, nil
	}
	if sum != idx.TotalSize {
		return nil, fmt.Errorf("%w: the shards' headers give %d bytes, the index's total_size %d", gpufleet.ErrInvalid, sum, idx.TotalSize)
	}
	ck.Sized, ck.Dense, ck.Experts = true, dense, experts
	return ck, nil
}
