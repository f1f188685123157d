package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func FuzzDecodeSubmitRequest(f *testing.F) {
	for _, s := range []string{
		`{"resources":{"gpus":8,"nodes":2,"gpu_models":["h100-sxm-80gb"]},"command":["torchrun","train.py"]}`,
		`{"name":"nb","resources":{"gpus":1,"sharing":"mig:1g.18gb","gpu_memory_min_bytes":19327352832},"time_limit":"4h"}`,
		`{"model":{"name":"llama-3.1-8b","config":{"hidden_size":4096}},"resources":{"gpus":1}}`,
		`{"gpu":1}`, `{"resources":{"gpus":"x"}}`, `{} {}`, `[]`, `null`, ``, `{"env":{"A":1}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeSubmitRequest(strings.NewReader(body))
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Whatever was accepted has only known fields: it survives a
		// strict round trip unchanged.
		data, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeSubmitRequest(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("re-decoding %s: %v", data, err)
		}
		data2, _ := json.Marshal(again)
		if !bytes.Equal(data, data2) {
			t.Fatalf("round trip changed the request:\n%s\n%s", data, data2)
		}
		// An unknown field anywhere at the top level is rejected.
		var m map[string]any
		if json.Unmarshal(data, &m) == nil {
			m["definitely_unknown"] = 1
			bad, _ := json.Marshal(m)
			if _, err := DecodeSubmitRequest(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), `unknown field "definitely_unknown"`) {
				t.Fatalf("unknown field accepted or badly named: %v", err)
			}
		}
	})
}
