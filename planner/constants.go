package planner

// Efficiency constants. They are few, the same for every model family and
// every row of docs/ACCURACY.md, and each says where it comes from. They are
// not fitted per row or per family.
const (
	// memEfficiency is the fraction of datasheet memory bandwidth that
	// streaming kernels (decode GEMV over weights and KV) achieve.
	// FasterTransformer profiling measured 0.87-0.90 (llm-analysis,
	// examples/fastertransformer); Azure's GB200 HBM test 0.92; llm-analysis
	// warns that above 0.8 is optimistic in end-to-end inference. 0.8 sits
	// between.
	memEfficiency = 0.80

	// computeEfficiency is the fraction of dense tensor peak that large
	// inference GEMMs (prefill, large-batch decode) achieve. FT 13B MLP GEMMs
	// 0.72 and attention projections 0.54 (llm-analysis); cuBLASLt FP8 on
	// GB200 0.55 (Azure). 0.65 sits between.
	computeEfficiency = 0.65

	// trainEfficiency is the fraction of dense peak that the GEMMs of a
	// training step achieve before communication and pipeline bubbles are
	// added. Korthikanti et al. reached 54.2% MFU end to end with selective
	// recompute; Megatron's 1T run 52% (arXiv:2104.04473). Those include
	// their own bubbles and communication, so the kernel-level figure is a
	// little higher: 0.58.
	trainEfficiency = 0.58

	// layerLaunchOverheadS is the fixed per-layer cost of one forward pass
	// (kernel launches, synchronisation, small elementwise kernels): about
	// ten kernels of ~5 us each. It explains why roofline under-predicts
	// small prefills (LLM-Viewer#4: 7.0 ms predicted against 16.1 ms
	// measured for LLaMA-7B, batch 1, 128 tokens).
	layerLaunchOverheadS = 50e-6

	// firstTokenOverheadS is what a request's first token costs beyond its
	// prefill: the engine's host work of one step that nothing overlaps
	// (scheduling, preparing the step's inputs, copying the sampled token
	// back and returning it). vLLM measured 5-13 ms of GPU idle per step
	// from that work before multi-step and async scheduling hid it for
	// decode (vllm-project/vllm#6854); it still sits between a request's
	// arrival and its first token. 5 ms, the low end.
	firstTokenOverheadS = 5e-3

	// collectiveLatencyS is the latency of one small NCCL collective inside
	// an NVLink domain. llm-analysis uses 8 us as the minimum message
	// latency; planning.md section 3.2 puts a decode all-reduce at 10-20 us.
	collectiveLatencyS = 15e-6
	// pcieCollectiveLatencyS is the same over PCIe between GPUs of one host.
	pcieCollectiveLatencyS = 25e-6
	// interNodeLatencyS is the same across nodes over InfiniBand or RoCE.
	interNodeLatencyS = 40e-6

	// linkEfficiency is the achieved bus bandwidth of NCCL ring collectives
	// as a fraction of per-direction line rate: H100 NVLink4 ring ~370 of
	// 450 GB/s (nccl-tests#212), A100 ~200-230 of 300 (nccl-tests#149);
	// planning.md: "NCCL ring busbw ~ 80% of NVLink line rate".
	linkEfficiency = 0.80

	// interNodeBytesPerSPerGPU is the scale-out bandwidth per GPU between
	// nodes, per direction: one 400 Gb/s NIC per GPU on current HGX systems
	// (50 GB/s); nccl-tests#119 measured 84.8 of 100 GB/s busbw for 4x HDR
	// 200 Gb per 8 A100.
	interNodeBytesPerSPerGPU = 50e9

	// cudaContextBytes covers the CUDA context, cuBLAS/cuBLASLt workspaces
	// and CUDA graphs on each GPU: the context alone is 300-500 MiB on
	// current drivers, CUDA graphs add 0.5-2 GB (planning.md section 2.8).
	cudaContextBytes = 1 << 30
	// ncclBufferBytes is what NCCL allocates per GPU once tensor or data
	// parallelism needs collectives; vLLM#2031 found these allocations
	// invisible to the framework's own accounting.
	ncclBufferBytes = 512 << 20
	// allocatorFragmentation is the caching allocator's slack over live
	// tensors (PyTorch reserves more than it allocates).
	allocatorFragmentation = 0.05

	// prefillChunkTokens is how many prompt tokens one forward pass takes at
	// most (vLLM's max_num_batched_tokens with chunked prefill, 8192); it
	// sizes the inference activation workspace.
	prefillChunkTokens = 8192

	// defaultMaxSeqs caps the batch a serving engine runs at once when the
	// user asks for none (vLLM's default max_num_seqs, 256).
	defaultMaxSeqs = 256

	// pagedBlockTokens is the KV-cache block size of paged engines (vLLM 16).
	pagedBlockTokens = 16

	// averagePowerFraction is the average draw of a busy accelerator as a
	// fraction of its TDP, used for energy: an assumption (LLM serving and
	// training typically draw 70-90% of TDP); energy figures are estimates.
	averagePowerFraction = 0.8

	// gpusPerHost is the GPUs of one server outside an NVLink domain larger
	// than 8: beyond it, traffic crosses the network.
	gpusPerHost = 8

	// quantGroupSize is the group size of 4-bit integer weight formats
	// (GPTQ/AWQ default 128) with a 16-bit scale and a 4-bit zero point.
	quantGroupSize = 128
	// fp4GroupSize is NVFP4's micro-block: 16 values share one FP8 scale.
	fp4GroupSize = 16

	// moeHalfTokens is the tokens per expert at which the routed experts'
	// grouped GEMMs run at half a dense GEMM's efficiency: m tokens per
	// expert run at m/(m+moeHalfTokens) of it. DeepGEMM's grouped FP8 GEMMs
	// on H800 (deepseek-ai/DeepGEMM README, Feb 2025, masked layout, K 7168,
	// against its 4096x4096x7168 dense GEMM's 1304 TFLOPS) reach 0.95 at
	// 1024 tokens per expert, 0.80 at 512 and 0.71 at 256 (m/(m+h) gives h
	// 54, 128, 105); at 4096 its contiguous layout matches dense (0.99-1.07).
	// TensorRT-LLM's MoE-as-dense-GEMM blog (blog24) puts the grouped GEMMs
	// of DeepSeek-V3 near peak only above 10k tokens a layer (~300 per
	// expert).
	moeHalfTokens = 100

	// expertImbalance is the routed tokens the busiest expert-parallel rank
	// receives over the mean. TensorRT-LLM measured DeepSeek-R1 over 32
	// ranks at 1.11 with DeepSeek's expert-placement load balancer (EPLB)
	// and 2.56 without (tech blog 4, Table 1); vLLM measured a 16-rank run
	// at 1.069 without and 1.008 with (PR #50647). Large expert-parallel
	// deployments run a balancer (DeepSeek, SGLang, TensorRT-LLM), so the
	// plan takes 1.11; without one the busiest rank can take twice that.
	expertImbalance = 1.11
)
