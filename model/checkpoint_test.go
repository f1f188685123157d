package model

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

// header writes a safetensors header for the JSON j.
func header(j string) []byte {
	b := make([]byte, 8, 8+len(j))
	binary.LittleEndian.PutUint64(b, uint64(len(j)))
	return append(b, j...)
}

// TestSafetensorsIndex reads an index and refuses what is not one.
func TestSafetensorsIndex(t *testing.T) {
	idx, err := ParseSafetensorsIndex([]byte(`{"metadata":{"total_size":4096},"weight_map":{"lm_head.weight":"model-00002-of-00002.safetensors","model.embed_tokens.weight":"model-00001-of-00002.safetensors"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if idx.TotalSize != 4096 || len(idx.WeightMap) != 2 || strings.Join(idx.Shards(), ",") != "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors" {
		t.Errorf("index %+v, shards %v", idx, idx.Shards())
	}
	for name, in := range map[string]string{
		"not json":        `{"metadata":`,
		"no total":        `{"weight_map":{}}`,
		"negative total":  `{"metadata":{"total_size":-1},"weight_map":{}}`,
		"fractional":      `{"metadata":{"total_size":1.5},"weight_map":{}}`,
		"shard with path": `{"metadata":{"total_size":8},"weight_map":{"a":"../etc/passwd"}}`,
		"name not text":   `{"metadata":{"total_size":8},"weight_map":{"a\u0001":"x.safetensors"}}`,
	} {
		if _, err := ParseSafetensorsIndex([]byte(in)); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
}

// TestSafetensorsHeader reads a header-only file and a header followed
// by data, and refuses inconsistent ones.
func TestSafetensorsHeader(t *testing.T) {
	j := `{"__metadata__":{"format":"pt"},"b.weight":{"dtype":"F8_E4M3","shape":[4,8],"data_offsets":[0,32]},"a.weight_scale":{"dtype":"F32","shape":[4,1],"data_offsets":[32,48]}}  `
	for _, data := range [][]byte{header(j), append(header(j), make([]byte, 48)...)} {
		ts, err := ParseSafetensorsHeader(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 2 || ts[0].Name != "a.weight_scale" || ts[0].Bytes != 16 || ts[1].Bytes != 32 {
			t.Errorf("tensors %+v", ts)
		}
	}
	for name, data := range map[string][]byte{
		"short":          []byte{1, 2},
		"huge length":    append([]byte{0, 0, 0, 0, 0, 0, 0, 1}, '{', '}'),
		"truncated":      header(j)[:20],
		"unknown dtype":  header(`{"a":{"dtype":"Q3","shape":[1],"data_offsets":[0,1]}}`),
		"wrong span":     header(`{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}}`),
		"negative shape": header(`{"a":{"dtype":"BF16","shape":[-4],"data_offsets":[0,0]}}`),
		"overflow shape": header(`{"a":{"dtype":"F64","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}`),
	} {
		if _, err := ParseSafetensorsHeader(data); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
}

// TestNewCheckpoint places tensors on layers by the family's names and
// leaves layers past the config's out.
func TestNewCheckpoint(t *testing.T) {
	c := &Config{ModelType: "llama", NumLayers: 2, HiddenSize: 8, NumHeads: 1, IntermediateSize: 8, VocabSize: 4, GatedMLP: true}
	names := map[string]int64{
		"model.embed_tokens.weight": 64, "lm_head.weight": 64, "model.norm.weight": 16,
		"model.layers.0.self_attn.q_proj.weight": 128, "model.layers.1.mlp.experts.3.down_proj.weight": 128,
		"model.layers.2.eh_proj.weight": 256,
	}
	idx := &SafetensorsIndex{WeightMap: map[string]string{}}
	var ts []Tensor
	for n, b := range names {
		idx.WeightMap[n] = "s.safetensors"
		idx.TotalSize += b
		ts = append(ts, Tensor{Name: n, Bytes: b})
	}
	ck, err := NewCheckpoint(c, idx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !ck.Sized || ck.Embedding != 64 || ck.Head != 64 || ck.Dense[0] != 128 || ck.Dense[1] != 16 || ck.Experts[1] != 128 || ck.ExtraLayers != 1 || ck.ExtraBytes != 256 {
		t.Errorf("checkpoint %+v", ck)
	}
	unsized, err := NewCheckpoint(c, idx, ts[:2])
	if err != nil || unsized.Sized || unsized.TotalBytes != idx.TotalSize || unsized.ExtraLayers != 1 {
		t.Errorf("partial headers: %+v, %v", unsized, err)
	}
	idx.TotalSize++
	if _, err := NewCheckpoint(c, idx, ts); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("headers not summing to total_size: error %v", err)
	}
}

// FuzzSafetensorsHeader: no header stops the reader, and what it
// accepts has sizes that match dtype and shape.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(header(`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`))
	f.Add(header(`{"__metadata__":{},"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := ParseSafetensorsHeader(data)
		if err != nil {
			return
		}
		for _, x := range ts {
			if x.Bytes < 0 || dtypeBits[x.DType] == 0 {
				t.Errorf("accepted tensor %+v", x)
			}
		}
	})
}
