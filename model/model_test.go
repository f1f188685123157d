package model

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet"
)

// load returns a built-in by name, or a testdata config when name ends in
// ".json".
func load(t testing.TB, name string) *Config {
	t.Helper()
	if !strings.HasSuffix(name, ".json") {
		c, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(strings.TrimSuffix(name, ".json"), data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkPublished fails unless got (parameters) is within 0.5% of the
// published figure in billions, or half its last digit where that is larger.
func checkPublished(t *testing.T, what string, got int64, published string) {
	t.Helper()
	pub, err := strconv.ParseFloat(published, 64)
	if err != nil {
		t.Fatal(err)
	}
	decimals := 0
	if i := strings.IndexByte(published, '.'); i >= 0 {
		decimals = len(published) - i - 1
	}
	halfDigit := 0.5
	for range decimals {
		halfDigit /= 10
	}
	tol := max(0.005*pub, halfDigit)
	gotB := float64(got) / 1e9
	if d := gotB - pub; d > tol || d < -tol {
		t.Errorf("%s = %.4fB, published %sB: off by %+.4fB, tolerance %.4fB", what, gotB, published, d, tol)
	}
}

// TestParamsMatchPublished checks every shared and testdata model against
// its published parameter counts (configs/SOURCES.md, testdata/README.md).
func TestParamsMatchPublished(t *testing.T) {
	tests := map[string]struct {
		model string
		total string
		// active is compared with Params.Active (incl. embeddings) or, when
		// activeExcludingEmbeddings, with ActiveExcludingEmbeddings.
		active                    string
		activeExcludingEmbeddings bool
		// activeInGapTest says the active count is checked by
		// TestDeepSeekActiveKnownGaps instead.
		activeInGapTest bool
	}{
		"llama 2 7b is 6.74B":                   {model: "llama-2-7b", total: "6.74"},
		"llama 2 13b is 13.0B":                  {model: "llama-2-13b", total: "13.0"},
		"llama 2 70b is 69.0B":                  {model: "llama-2-70b", total: "69.0"},
		"llama 3.1 8b is 8.03B":                 {model: "llama-3.1-8b", total: "8.03"},
		"llama 3.1 70b is 70.6B":                {model: "llama-3.1-70b", total: "70.6"},
		"llama 3.1 405b is 405.9B":              {model: "llama-3.1-405b", total: "405.9"},
		"mistral 7b v0.1 is 7.24B":              {model: "mistral-7b-v0.1", total: "7.24"},
		"mistral 7b v0.3 with 32768 vocab":      {model: "mistral-7b-v0.3", total: "7.25"},
		"mixtral 8x7b activates 12.9B of 46.7B": {model: "mixtral-8x7b-v0.1", total: "46.7", active: "12.9"},
		"qwen2 7b is 7.62B":                     {model: "qwen2-7b", total: "7.62"},
		"gemma 2 9b is 9.24B":                   {model: "gemma-2-9b", total: "9.24"},
		"gpt-j 6b is 6.05B":                     {model: "gpt-j-6b", total: "6.05"},
		"deepseek v2 lite is 15.7B":             {model: "deepseek-v2-lite", total: "15.7", activeInGapTest: true},
		"qwen1.5 moe activates 2.7B of 14.3B":   {model: "qwen1.5-moe-a2.7b.json", total: "14.3", active: "2.7"},
		"gemma 7b is 8.54B":                     {model: "gemma-7b.json", total: "8.54"},
		"phi-3 mini is 3.82B":                   {model: "phi-3-mini-4k-instruct.json", total: "3.82"},
		"gpt-neox 20b is 20.6B":                 {model: "gpt-neox-20b.json", total: "20.6"},
		"pythia 6.9b is 6.9B":                   {model: "pythia-6.9b.json", total: "6.9"},
		"deepseek v3 main model is 671B":        {model: "deepseek-v3.json", total: "671", activeInGapTest: true},
		"qwen3 32b is 32.8B":                    {model: "qwen3-32b.json", total: "32.8"},
		"qwen3 235b activates 22B":              {model: "qwen3-235b-a22b.json", total: "235", active: "22"},
		"minimax m2 is 229B, 10B active":        {model: "minimax-m2.json", total: "229", active: "10", activeExcludingEmbeddings: true},
		"kimi k2 is 1.027T":                     {model: "kimi-k2-instruct.json", total: "1027", activeInGapTest: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := load(t, tc.model).Params()
			checkPublished(t, "total", p.Total, tc.total)
			switch {
			case tc.activeInGapTest:
			case tc.active == "" && p.Active != p.Total:
				t.Errorf("dense model: active %d != total %d", p.Active, p.Total)
			case tc.active != "" && tc.activeExcludingEmbeddings:
				checkPublished(t, "active excluding embeddings", p.ActiveExcludingEmbeddings, tc.active)
			case tc.active != "":
				checkPublished(t, "active", p.Active, tc.active)
			}
		})
	}
}

// TestDeepSeekActiveKnownGaps pins DeepSeek's active counts. DeepSeek's
// published active figures cannot both be met by one convention, and
// neither is met by ours within the 0.5% tolerance:
//   - DeepSeek-V2-Lite "2.4B": counting the published architecture gives
//     2.24B without embeddings and 2.66B with them (deepseek-ai/DeepSeek-V2
//     issue #73 reports the same "a little over 2.6B" and has no answer).
//   - DeepSeek-V3 "37B": 35.70B without embeddings, 37.55B with both the
//     embedding and the head (+1.5%); "37B" is the truncation of 37.55B.
//
// The counts are checked exactly, and against the published figures with
// the wider tolerance each gap needs, so a regression still fails.
func TestDeepSeekActiveKnownGaps(t *testing.T) {
	tests := map[string]struct {
		model                         string
		wantActive, wantActiveExclEmb int64
		published                     float64 // billions
		gotPublishedField             string  // which count the gap is measured on
		gap                           float64 // allowed relative gap
	}{
		"v2 lite 2.4B is 2.24B without embeddings": {
			model: "deepseek-v2-lite", wantActive: 2661150208, wantActiveExclEmb: 2241719808,
			published: 2.4, gotPublishedField: "excl", gap: 0.07,
		},
		"v3 37B is 37.55B with embedding and head": {
			model: "deepseek-v3.json", wantActive: 37552297472, wantActiveExclEmb: 35698939392,
			published: 37, gotPublishedField: "active", gap: 0.016,
		},
		"kimi k2 32B is 32.86B with embedding and head, as V3's": {
			model: "kimi-k2-instruct.json", wantActive: 32861500928, wantActiveExclEmb: 30512690688,
			published: 32, gotPublishedField: "active", gap: 0.027,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := load(t, tc.model).Params()
			if p.Active != tc.wantActive || p.ActiveExcludingEmbeddings != tc.wantActiveExclEmb {
				t.Errorf("active, excluding embeddings = %d, %d; want %d, %d",
					p.Active, p.ActiveExcludingEmbeddings, tc.wantActive, tc.wantActiveExclEmb)
			}
			got := p.Active
			if tc.gotPublishedField == "excl" {
				got = p.ActiveExcludingEmbeddings
			}
			rel := float64(got)/1e9/tc.published - 1
			if rel > tc.gap || rel < -tc.gap {
				t.Errorf("%.4fB is %+.2f%% from the published %gB, more than the documented %.1f%%",
					float64(got)/1e9, 100*rel, tc.published, 100*tc.gap)
			}
		})
	}
}

// TestParamsBreakdown pins whole Params for one model of each shape, so a
// change to any part of the count shows up.
func TestParamsBreakdown(t *testing.T) {
	tests := map[string]struct {
		model string
		want  Params
	}{
		"llama 2 7b: untied head, two RMSNorms a layer": {
			model: "llama-2-7b",
			want: Params{
				Total: 6738415616, Active: 6738415616, ActiveExcludingEmbeddings: 6476271616,
				Embedding: 131072000, Head: 131072000,
				Attention: 32 * 4 * 4096 * 4096, DenseMLP: 32 * 3 * 4096 * 11008,
				Norms: 65 * 4096, LargestLayer: 4*4096*4096 + 3*4096*11008 + 2*4096,
			},
		},
		"mixtral: eight experts a layer, router without bias": {
			model: "mixtral-8x7b-v0.1",
			want: Params{
				Total: 46702792704, Active: 12879925248, ActiveExcludingEmbeddings: 12617781248,
				Embedding: 131072000, Head: 131072000,
				Attention: 32 * (2*4096*4096 + 2*4096*1024),
				Shared:    32 * 4096 * 8, Experts: 32 * 8 * 3 * 4096 * 14336, OneExpert: 3 * 4096 * 14336,
				Norms:        65 * 4096,
				LargestLayer: 2*4096*4096 + 2*4096*1024 + 8*3*4096*14336 + 4096*8 + 2*4096,
			},
		},
		"gpt-j: biased MLP and head, one LayerNorm a layer": {
			model: "gpt-j-6b",
			want: Params{
				Total: 6050882784, Active: 6050882784, ActiveExcludingEmbeddings: 5637955584,
				Embedding: 50400 * 4096, Head: 50400*4096 + 50400,
				Attention: 28 * 4 * 4096 * 4096, DenseMLP: 28 * (2*4096*16384 + 16384 + 4096),
				Norms:        29 * 2 * 4096,
				LargestLayer: 4*4096*4096 + 2*4096*16384 + 16384 + 4096 + 2*4096,
			},
		},
		"gemma 2 9b: tied head, four norms a layer": {
			model: "gemma-2-9b",
			want: Params{
				Total: 9241705984, Active: 9241705984, ActiveExcludingEmbeddings: 8324201984,
				Embedding: 256000 * 3584,
				Attention: 42 * (2*3584*16*256 + 2*3584*8*256), DenseMLP: 42 * 3 * 3584 * 14336,
				Norms:        (42*4 + 1) * 3584,
				LargestLayer: 2*3584*16*256 + 2*3584*8*256 + 3*3584*14336 + 4*3584,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, load(t, tc.model).Params()); diff != "" {
				t.Errorf("Params mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParamsTotalsExact pins every model's total to the parameter.
func TestParamsTotalsExact(t *testing.T) {
	want := map[string]int64{
		"deepseek-v2-lite": 15706484224, "gemma-2-9b": 9241705984, "gpt-j-6b": 6050882784,
		"llama-2-13b": 13015864320, "llama-2-70b": 68976648192, "llama-2-7b": 6738415616,
		"llama-3.1-405b": 405853388800, "llama-3.1-70b": 70553706496, "llama-3.1-8b": 8030261248,
		"mistral-7b-v0.1": 7241732096, "mistral-7b-v0.3": 7248023552, "mixtral-8x7b-v0.1": 46702792704,
		"qwen2-7b":         7615616512,
		"deepseek-v3.json": 671026419200, "gemma-7b.json": 8537680896, "gpt-neox-20b.json": 20554567680,
		"phi-3-mini-4k-instruct.json": 3821079552, "pythia-6.9b.json": 6857302016,
		"qwen1.5-moe-a2.7b.json": 14315784192, "qwen3-32b.json": 32762123264, "qwen3-235b-a22b.json": 235093634560,
		"minimax-m2.json": 228689764864, "kimi-k2-instruct.json": 1026408232448,
	}
	got := map[string]int64{}
	for name := range want {
		got[name] = load(t, name).Params().Total
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("totals mismatch (-want +got):\n%s", diff)
	}
}

// TestParamsParts checks that the parts add up for every model.
func TestParamsParts(t *testing.T) {
	names := BuiltinNames()
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	for _, name := range names {
		c := load(t, name)
		p := c.Params()
		if sum := p.Embedding + p.Head + p.Attention + p.DenseMLP + p.Shared + p.Experts + p.Norms; sum != p.Total {
			t.Errorf("%s: parts add to %d, total %d", name, sum, p.Total)
		}
		if p.Active-p.ActiveExcludingEmbeddings != p.Embedding+p.Head {
			t.Errorf("%s: active minus active excluding embeddings is not embedding + head", name)
		}
		if c.IsMoE() != (p.Experts > 0) || (p.Active < p.Total) != c.IsMoE() {
			t.Errorf("%s: IsMoE %v but experts %d, active %d of %d", name, c.IsMoE(), p.Experts, p.Active, p.Total)
		}
		if p.LargestLayer <= 0 || p.LargestLayer*int64(c.NumLayers) < p.Attention+p.DenseMLP+p.Experts {
			t.Errorf("%s: largest layer %d too small", name, p.LargestLayer)
		}
	}
}

// TestKVCacheBytesPerToken checks the per-token KV cache of every model.
func TestKVCacheBytesPerToken(t *testing.T) {
	tests := map[string]struct {
		model string
		bytes float64
		want  int64
	}{
		"llama 2 7b multi-head: 512 KiB":        {model: "llama-2-7b", bytes: 2, want: 524288},
		"llama 2 13b multi-head":                {model: "llama-2-13b", bytes: 2, want: 2 * 40 * 40 * 128 * 2},
		"llama 2 70b eight kv heads: 320 KiB":   {model: "llama-2-70b", bytes: 2, want: 327680},
		"llama 3.1 8b: 128 KiB":                 {model: "llama-3.1-8b", bytes: 2, want: 131072},
		"llama 3.1 70b: 320 KiB":                {model: "llama-3.1-70b", bytes: 2, want: 327680},
		"llama 3.1 405b":                        {model: "llama-3.1-405b", bytes: 2, want: 2 * 126 * 8 * 128 * 2},
		"llama 3.1 8b in fp8 halves":            {model: "llama-3.1-8b", bytes: 1, want: 65536},
		"mistral v0.1 ignores the window":       {model: "mistral-7b-v0.1", bytes: 2, want: 131072},
		"mistral v0.3":                          {model: "mistral-7b-v0.3", bytes: 2, want: 131072},
		"mixtral as mistral":                    {model: "mixtral-8x7b-v0.1", bytes: 2, want: 131072},
		"qwen2 7b four kv heads: 56 KiB":        {model: "qwen2-7b", bytes: 2, want: 57344},
		"gemma 2 head_dim 256":                  {model: "gemma-2-9b", bytes: 2, want: 2 * 42 * 8 * 256 * 2},
		"gpt-j head 256":                        {model: "gpt-j-6b", bytes: 2, want: 2 * 28 * 16 * 256 * 2},
		"deepseek v2 lite latent and rope key":  {model: "deepseek-v2-lite", bytes: 2, want: 31104},
		"deepseek v3 latent: 61*(512+64)*2":     {model: "deepseek-v3.json", bytes: 2, want: 70272},
		"qwen1.5 moe multi-head":                {model: "qwen1.5-moe-a2.7b.json", bytes: 2, want: 2 * 24 * 16 * 128 * 2},
		"gemma 7b multi-head 256":               {model: "gemma-7b.json", bytes: 2, want: 2 * 28 * 16 * 256 * 2},
		"phi-3 mini head 96":                    {model: "phi-3-mini-4k-instruct.json", bytes: 2, want: 2 * 32 * 32 * 96 * 2},
		"gpt-neox 20b":                          {model: "gpt-neox-20b.json", bytes: 2, want: 2 * 44 * 64 * 96 * 2},
		"pythia 6.9b":                           {model: "pythia-6.9b.json", bytes: 2, want: 2 * 32 * 32 * 128 * 2},
		"fp4 halves fp8 and rounds to the byte": {model: "deepseek-v2-lite", bytes: 0.5, want: 7776},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := load(t, tc.model).KVCacheBytesPerToken(tc.bytes); got != tc.want {
				t.Errorf("KVCacheBytesPerToken(%g) = %d, want %d", tc.bytes, got, tc.want)
			}
		})
	}
}

// TestKVCacheBytesSlidingWindow checks that window layers stop growing at
// the window and the others do not.
func TestKVCacheBytesSlidingWindow(t *testing.T) {
	const mistralToken = 32 * 2 * 8 * 128 * 2 // per token, all 32 layers
	const gemmaLayerToken = 2 * 8 * 256 * 2   // per token, one layer
	tests := map[string]struct {
		model   string
		context int64
		want    int64
	}{
		"mistral v0.1 at 8192 tokens caps at 4096": {model: "mistral-7b-v0.1", context: 8192, want: 4096 * mistralToken},
		"mistral v0.1 within the window":           {model: "mistral-7b-v0.1", context: 1000, want: 1000 * mistralToken},
		"mistral v0.3 has no window":               {model: "mistral-7b-v0.3", context: 8192, want: 8192 * mistralToken},
		"gemma 2 at 8192 caps the 21 even layers": {
			model: "gemma-2-9b", context: 8192, want: 21*4096*gemmaLayerToken + 21*8192*gemmaLayerToken,
		},
		"gemma 2 within the window is uncapped": {model: "gemma-2-9b", context: 4096, want: 42 * 4096 * gemmaLayerToken},
		"qwen2 window is off (use_sliding_window false)": {
			model: "qwen2-7b", context: 200000, want: 200000 * 57344,
		},
		"phi-3 mini window 2047 on every layer": {
			model: "phi-3-mini-4k-instruct.json", context: 4096, want: 2047 * 2 * 32 * 32 * 96 * 2,
		},
		"deepseek v3 one sequence of 128k": {model: "deepseek-v3.json", context: 131072, want: 131072 * 70272},
		"an empty context needs nothing":   {model: "llama-3.1-8b", context: 0, want: 0},
		"a negative context needs nothing": {model: "llama-3.1-8b", context: -5, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := load(t, tc.model).KVCacheBytes(tc.context, 2); got != tc.want {
				t.Errorf("KVCacheBytes(%d, 2) = %d, want %d", tc.context, got, tc.want)
			}
		})
	}
}

// TestParseDerivedFields checks what Parse fills in beyond the file.
func TestParseDerivedFields(t *testing.T) {
	type derived struct {
		HeadDim, KVHeads, Inter, MoEInter, SharedInter, RotaryDim int
		Tied, Gated, MoE, MLA                                     bool
		Sliding, MoELayers                                        string // one char a layer: S/M or .
	}
	pattern := func(s []bool, c byte) string {
		if s == nil {
			return ""
		}
		b := make([]byte, len(s))
		for i, v := range s {
			b[i] = '.'
			if v {
				b[i] = c
			}
		}
		return string(b)
	}
	tests := map[string]struct {
		model string
		want  derived
	}{
		"llama 2 7b derives head_dim 128 and takes kv heads from the file": {
			model: "llama-2-7b", want: derived{HeadDim: 128, KVHeads: 32, Inter: 11008, Gated: true},
		},
		"mistral v0.1 slides on every layer": {
			model: "mistral-7b-v0.1",
			want:  derived{HeadDim: 128, KVHeads: 8, Inter: 14336, Gated: true, Sliding: strings.Repeat("S", 32)},
		},
		"mixtral experts use intermediate_size": {
			model: "mixtral-8x7b-v0.1",
			want: derived{HeadDim: 128, KVHeads: 8, Inter: 14336, MoEInter: 14336, Gated: true, MoE: true,
				MoELayers: strings.Repeat("M", 32)},
		},
		"gemma 2 slides on even layers and ties embeddings by default": {
			model: "gemma-2-9b",
			want: derived{HeadDim: 256, KVHeads: 8, Inter: 14336, Tied: true, Gated: true,
				Sliding: strings.Repeat("S.", 21)},
		},
		"gpt-j takes n_inner null as 4*n_embd": {
			model: "gpt-j-6b", want: derived{HeadDim: 256, KVHeads: 16, Inter: 16384, RotaryDim: 64},
		},
		"deepseek v2 lite: first layer dense, MLA": {
			model: "deepseek-v2-lite",
			want: derived{HeadDim: 192, KVHeads: 16, Inter: 10944, MoEInter: 1408, SharedInter: 2816,
				Gated: true, MoE: true, MLA: true, MoELayers: "." + strings.Repeat("M", 26)},
		},
		"deepseek v3: three dense layers": {
			model: "deepseek-v3.json",
			want: derived{HeadDim: 192, KVHeads: 128, Inter: 18432, MoEInter: 2048, SharedInter: 2048,
				Gated: true, MoE: true, MLA: true, MoELayers: "..." + strings.Repeat("M", 58)},
		},
		"gpt-neox rotates a quarter of each head": {
			model: "gpt-neox-20b.json", want: derived{HeadDim: 96, KVHeads: 64, Inter: 24576, RotaryDim: 24},
		},
		"qwen1.5 moe: one shared expert": {
			model: "qwen1.5-moe-a2.7b.json",
			want: derived{HeadDim: 128, KVHeads: 16, Inter: 5632, MoEInter: 1408, SharedInter: 5632,
				Gated: true, MoE: true, MoELayers: strings.Repeat("M", 24)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := load(t, tc.model)
			got := derived{
				HeadDim: c.HeadDim, KVHeads: c.NumKVHeads, Inter: c.IntermediateSize, MoEInter: c.MoEIntermediateSize,
				SharedInter: c.SharedExpertIntermediateSize, RotaryDim: c.RotaryDim,
				Tied: c.TieWordEmbeddings, Gated: c.GatedMLP, MoE: c.IsMoE(), MLA: c.IsMLA(),
				Sliding: pattern(c.SlidingLayers, 'S'), MoELayers: pattern(c.MoELayers, 'M'),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("derived fields mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseLayerRules checks the per-layer rules on small hand-written
// configs: Qwen2-MoE's sparse step and dense-only layers, DeepSeek's layer
// frequency, Qwen2's max_window_layers, layer_types and MHA defaults.
func TestParseLayerRules(t *testing.T) {
	tests := map[string]struct {
		json                string
		wantMoE, wantSlide  []bool
		wantHeadDim, wantKV int
	}{
		"qwen2_moe with step 2 and layer 3 dense-only": {
			json: `{"model_type":"qwen2_moe","hidden_size":64,"num_hidden_layers":6,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"num_experts":4,"num_experts_per_tok":2,
				"moe_intermediate_size":32,"decoder_sparse_step":2,"mlp_only_layers":[3]}`,
			wantMoE: []bool{false, true, false, false, false, true}, wantHeadDim: 16, wantKV: 4,
		},
		"deepseek_v2 with moe_layer_freq 2 after one dense layer": {
			json: `{"model_type":"deepseek_v2","hidden_size":64,"num_hidden_layers":5,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"kv_lora_rank":16,"qk_rope_head_dim":8,
				"qk_nope_head_dim":16,"v_head_dim":16,"n_routed_experts":4,"num_experts_per_tok":2,
				"moe_intermediate_size":32,"first_k_dense_replace":1,"moe_layer_freq":2}`,
			wantMoE: []bool{false, false, true, false, true}, wantHeadDim: 24, wantKV: 4,
		},
		"deepseek_v2 without routed experts is dense": {
			json: `{"model_type":"deepseek_v2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"kv_lora_rank":16,"qk_rope_head_dim":8,
				"qk_nope_head_dim":16,"v_head_dim":16,"n_routed_experts":null}`,
			wantHeadDim: 24, wantKV: 4,
		},
		"qwen2 sliding from max_window_layers on": {
			json: `{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
				"num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,"use_sliding_window":true,
				"sliding_window":16,"max_window_layers":2}`,
			wantSlide: []bool{false, false, true, true}, wantHeadDim: 16, wantKV: 2,
		},
		"gemma2 layer_types override the even-layer rule": {
			json: `{"model_type":"gemma2","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,
				"head_dim":32,"intermediate_size":128,"vocab_size":100,"sliding_window":16,
				"layer_types":["full_attention","sliding_attention","sliding_attention"]}`,
			wantSlide: []bool{false, true, true}, wantHeadDim: 32, wantKV: 4,
		},
		"qwen2_moe with every layer dense-only is dense": {
			json: `{"model_type":"qwen2_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"num_experts":4,"num_experts_per_tok":2,
				"moe_intermediate_size":32,"mlp_only_layers":[0,1]}`,
			wantHeadDim: 16, wantKV: 4,
		},
		"qwen2 with max_window_layers past the last layer does not slide": {
			json: `{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":4,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"use_sliding_window":true,
				"sliding_window":16,"max_window_layers":4}`,
			wantHeadDim: 16, wantKV: 4,
		},
		"mistral without sliding_window takes the 4096 default": {
			json: `{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100}`,
			wantSlide: []bool{true, true}, wantHeadDim: 16, wantKV: 4,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse("t", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantMoE, c.MoELayers); diff != "" {
				t.Errorf("MoELayers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSlide, c.SlidingLayers); diff != "" {
				t.Errorf("SlidingLayers (-want +got):\n%s", diff)
			}
			if c.IsMoE() != (tc.wantMoE != nil) {
				t.Errorf("IsMoE() = %v with MoELayers %v", c.IsMoE(), c.MoELayers)
			}
			if full := c.KVCacheBytesPerToken(2) * 100000; (c.KVCacheBytes(100000, 2) < full) != (tc.wantSlide != nil) {
				t.Errorf("KV cache at 100000 tokens %d, uncapped %d, sliding layers %v", c.KVCacheBytes(100000, 2), full, tc.wantSlide)
			}
			if c.HeadDim != tc.wantHeadDim || c.NumKVHeads != tc.wantKV {
				t.Errorf("head_dim, kv heads = %d, %d; want %d, %d", c.HeadDim, c.NumKVHeads, tc.wantHeadDim, tc.wantKV)
			}
		})
	}
}

// TestParseErrors checks that every rejected input names what is wrong and
// wraps the right sentinel.
func TestParseErrors(t *testing.T) {
	const llama = `"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100`
	tests := map[string]struct {
		json     string
		wantErr  error
		wantText []string
	}{
		"unknown model_type is named and the supported ones listed": {
			json: `{"model_type":"bert"}`, wantErr: gpufleet.ErrUnsupported,
			wantText: []string{`"bert"`, "llama", "deepseek_v3", "gpt_neox", "qwen2_moe"},
		},
		"missing model_type": {
			json: `{"hidden_size":64}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"model_type", "missing"},
		},
		"model_type of the wrong type": {
			json: `{"model_type":7}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"model_type", "string"},
		},
		"missing hidden_size names the field": {
			json: `{` + llama + `}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"hidden_size", "missing"},
		},
		"hidden_size as a string names the field": {
			json: `{` + llama + `,"hidden_size":"64"}`, wantErr: gpufleet.ErrInvalid,
			wantText: []string{"hidden_size", "want an integer, got string"},
		},
		"fractional hidden_size": {
			json: `{` + llama + `,"hidden_size":64.5}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"hidden_size", "64.5"},
		},
		"zero hidden_size": {
			json: `{` + llama + `,"hidden_size":0}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"hidden_size", "positive"},
		},
		"negative vocab_size": {
			json:    `{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":-1,"hidden_size":64}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"vocab_size", "positive"},
		},
		"heads that do not divide hidden without head_dim": {
			json: `{` + llama + `,"hidden_size":66}`, wantErr: gpufleet.ErrInvalid,
			wantText: []string{"num_attention_heads", "do not divide hidden size 66", "head_dim"},
		},
		"kv heads that do not divide heads": {
			json: `{` + llama + `,"hidden_size":64,"num_key_value_heads":3}`, wantErr: gpufleet.ErrInvalid,
			wantText: []string{"num_key_value_heads", "3 key/value heads"},
		},
		"top-k above the expert count": {
			json: `{"model_type":"mixtral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"num_local_experts":2,"num_experts_per_tok":3}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"num_experts_per_tok", "top-3", "2 experts"},
		},
		"mixtral without num_local_experts": {
			json: `{"model_type":"mixtral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"num_experts_per_tok":2}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"num_local_experts", "missing"},
		},
		"deepseek without kv_lora_rank": {
			json: `{"model_type":"deepseek_v2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"qk_rope_head_dim":8,"qk_nope_head_dim":16,"v_head_dim":16}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"kv_lora_rank", "missing"},
		},
		"mlp_only_layers out of range": {
			json: `{"model_type":"qwen2_moe","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
				"intermediate_size":128,"vocab_size":100,"num_experts":4,"num_experts_per_tok":2,
				"moe_intermediate_size":32,"mlp_only_layers":[5]}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"mlp_only_layers", "layer index"},
		},
		"tie_word_embeddings as a string": {
			json: `{` + llama + `,"hidden_size":64,"tie_word_embeddings":"yes"}`, wantErr: gpufleet.ErrInvalid,
			wantText: []string{"tie_word_embeddings", "boolean"},
		},
		"too many layers": {
			json:    `{"model_type":"llama","num_hidden_layers":100000000,"num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"hidden_size":64}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"num_hidden_layers"},
		},
		"dimensions too large to count": {
			json:    `{"model_type":"llama","num_hidden_layers":60000,"num_attention_heads":4,"intermediate_size":1000000000,"vocab_size":100,"hidden_size":1000000}`,
			wantErr: gpufleet.ErrInvalid, wantText: []string{"parameters"},
		},
		"malformed json":          {json: `{"model_type":`, wantErr: gpufleet.ErrInvalid, wantText: []string{"malformed json"}},
		"an array, not an object": {json: `[1,2]`, wantErr: gpufleet.ErrInvalid, wantText: []string{"want an object"}},
		"trailing data":           {json: `{"model_type":"llama"} {}`, wantErr: gpufleet.ErrInvalid, wantText: []string{"after the top-level object"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse("broken", []byte(tc.json))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tc.wantErr)
			}
			for _, s := range append(tc.wantText, `"broken"`) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestBuiltin checks the embedded configs: names, parsing, and the error for
// an unknown name.
func TestBuiltin(t *testing.T) {
	want := []string{
		"deepseek-v2-lite", "gemma-2-9b", "gpt-j-6b", "llama-2-13b", "llama-2-70b", "llama-2-7b",
		"llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "mistral-7b-v0.1", "mistral-7b-v0.3",
		"mixtral-8x7b-v0.1", "qwen2-7b",
	}
	if diff := cmp.Diff(want, BuiltinNames()); diff != "" {
		t.Errorf("BuiltinNames (-want +got):\n%s", diff)
	}
	for _, name := range want {
		c, err := Builtin(name)
		if err != nil {
			t.Errorf("Builtin(%q): %v", name, err)
			continue
		}
		if c.Name != name {
			t.Errorf("Builtin(%q).Name = %q", name, c.Name)
		}
	}
	a, _ := Builtin("llama-2-7b")
	a.NumLayers = 1
	if b, _ := Builtin("llama-2-7b"); b.NumLayers != 32 {
		t.Error("Builtin returned a shared Config")
	}
	for _, name := range []string{"gpt-5", "", "../configs/llama-2-7b", "SOURCES"} {
		_, err := Builtin(name)
		if !errors.Is(err, gpufleet.ErrNotFound) {
			t.Errorf("Builtin(%q) error %v, want ErrNotFound", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "llama-3.1-70b") {
			t.Errorf("Builtin(%q) error %q does not list the names", name, err)
		}
	}
}

// TestHandBuiltConfig checks that a Config written as a literal, without
// the fields Parse derives, counts as a Llama model.
func TestHandBuiltConfig(t *testing.T) {
	hand := &Config{NumLayers: 32, HiddenSize: 4096, NumHeads: 32, IntermediateSize: 11008, VocabSize: 32000, GatedMLP: true}
	parsed := load(t, "llama-2-7b")
	if diff := cmp.Diff(parsed.Params(), hand.Params()); diff != "" {
		t.Errorf("hand-built Params differ (-parsed +hand):\n%s", diff)
	}
	if got, want := hand.KVCacheBytesPerToken(2), parsed.KVCacheBytesPerToken(2); got != want {
		t.Errorf("hand-built KV bytes %d, want %d", got, want)
	}
}

// FuzzParse checks that Parse never panics and that what it accepts counts
// without going negative.
func FuzzParse(f *testing.F) {
	for _, name := range BuiltinNames() {
		data, err := configs.ReadFile("configs/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, q := range quantForms {
		f.Add(withQuant(f, q.base, q.config))
	}
	f.Add([]byte(`{"model_type":"llama"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		p := c.Params()
		if p.Total <= 0 || p.Active <= 0 || p.Active > p.Total || p.ActiveExcludingEmbeddings < 0 {
			t.Errorf("accepted config counts badly: %+v", p)
		}
		if c.KVCacheBytesPerToken(2) < 0 || c.KVCacheBytes(1<<20, 2) < 0 {
			t.Error("negative KV cache")
		}
		if c.MoELayers != nil && len(c.MoELayers) != c.NumLayers || c.SlidingLayers != nil && len(c.SlidingLayers) != c.NumLayers {
			t.Error("per-layer slices of the wrong length")
		}
		if w, ok := c.CheckpointWeights(); ok {
			if !(w.Total() > 0) || w.QuantizedParams+w.KeptParams != p.Total || len(w.Dense) != c.NumLayers {
				t.Errorf("checkpoint weights count badly: %.0f bytes, %d + %d of %d parameters", w.Total(), w.QuantizedParams, w.KeptParams, p.Total)
			}
		}
	})
}
