//go:build linux && cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// No CUDA header is needed to build this: the few types, values and
// prototypes used are declared here by hand, each checked against NVIDIA's
// public headers:
//   [cuda.h]       CUDA 12.6.3 include/cuda.h (github.com/zspace/system.cuda-12.6)
//   [types.h]      CUDA 12.6.3 include/library_types.h (same copy)
//   [cublas_api.h] CUDA 12.6.3 include/cublas_api.h (same copy)
//   [cublasLt.h]   CUDA 12.6.3 include/cublasLt.h (same copy)
//   [nccl.h]       NCCL src/nccl.h.in (github.com/NVIDIA/nccl, master 2026-06)
// Enum values are part of the libraries' ABI and do not change between
// versions; only symbol names gain _v2 suffixes, handled below.

// CUDA driver API [cuda.h].
typedef int CUresult;                   // enum cudaError_enum
typedef int CUdevice;                   // typedef int CUdevice_v1
typedef unsigned long long CUdeviceptr; // CUdeviceptr_v2 where __LP64__
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;   // also the runtime's cudaStream_t
typedef struct CUevent_st *CUevent;
typedef struct { char bytes[16]; } CUuuid; // struct CUuuid_st

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

// cudaDataType_t [types.h].
enum {
	CUDA_R_32F = 0,
	CUDA_R_64F = 1,
	CUDA_R_16F = 2,
	CUDA_R_8I = 3,
	CUDA_R_32I = 10,
	CUDA_R_16BF = 14,
	CUDA_R_8F_E4M3 = 28,
};

// cuBLAS and cuBLASLt [cublas_api.h, cublasLt.h].
typedef int cublasStatus_t; // CUBLAS_STATUS_SUCCESS = 0
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct gfMatmulDesc *cublasLtMatmulDesc_t;          // really cublasLtMatmulDescOpaque_t*
typedef struct gfMatrixLayout *cublasLtMatrixLayout_t;      // really cublasLtMatrixLayoutOpaque_t*
typedef struct gfMatmulPreference *cublasLtMatmulPreference_t; // really cublasLtMatmulPreferenceOpaque_t*
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;
_Static_assert(sizeof(cublasLtMatmulAlgo_t) == 64, "cublasLtMatmulAlgo_t is 64 bytes");
_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_OP_N = 0,                         // cublasOperation_t
	CUBLAS_OP_T = 1,
	CUBLAS_COMPUTE_32F = 68,                 // cublasComputeType_t
	CUBLAS_COMPUTE_64F = 70,
	CUBLAS_COMPUTE_32I = 72,
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
	CUBLASLT_MATMUL_DESC_TRANSA = 3,         // cublasLtMatmulDescAttributes_t, int32_t
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, // cublasLtMatmulPreferenceAttributes_t, uint64_t
};

// NCCL [nccl.h]. ncclCommInitAll makes every communicator of one node in
// this process; across nodes, rank 0's ncclGetUniqueId is handed to every
// rank's ncclCommInitRank (NCCL_UNIQUE_ID_BYTES 128).
typedef int ncclResult_t; // ncclSuccess = 0
typedef struct ncclComm *ncclComm_t;
#define GF_NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[GF_NCCL_UNIQUE_ID_BYTES]; } gfNcclUniqueId;
enum {
	ncclSuccess = 0,
	ncclSum = 0,     // ncclRedOp_t
	ncclFloat32 = 7, // ncclDataType_t
};

// gfAPI holds the entry points, found with dlsym.
typedef struct {
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
	CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuDeviceCanAccessPeer)(int *, CUdevice, CUdevice);
	CUresult (*cuCtxEnablePeerAccess)(CUcontext, unsigned int);
	CUresult (*cuCtxDisablePeerAccess)(CUcontext);

	cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *);
	cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t);
	const char *(*cublasLtGetStatusName)(cublasStatus_t);
	cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *, int, int);
	cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t);
	cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t, int, const void *, size_t);
	cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *, int, uint64_t, uint64_t, int64_t);
	cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t);
	cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *);
	cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
	cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t, int, const void *, size_t);
	cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t,
		cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
		cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
	cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,
		const void *, cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
		const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
		const cublasLtMatmulAlgo_t *, void *, size_t, CUstream);

	ncclResult_t (*ncclCommInitAll)(ncclComm_t *, int, const int *);
	ncclResult_t (*ncclGetUniqueId)(gfNcclUniqueId *);
	ncclResult_t (*ncclCommInitRank)(ncclComm_t *, int, gfNcclUniqueId, int);
	ncclResult_t (*ncclCommDestroy)(ncclComm_t);
	ncclResult_t (*ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclGroupStart)(void);
	ncclResult_t (*ncclGroupEnd)(void);
	const char *(*ncclGetErrorString)(ncclResult_t);
} gfAPI;

// gf_open dlopens path, or copies dlerror's message into err.
static void *gf_open(const char *path, char *err, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, n, "%s", e ? e : "dlopen failed");
	}
	return h;
}

// gf_sym sets *slot to the symbol name, or alt when name is missing.
static int gf_sym(void *h, void **slot, const char *name, const char *alt) {
	*slot = dlsym(h, name);
	if (*slot == NULL && alt != NULL) *slot = dlsym(h, alt);
	return *slot != NULL;
}

// The loaders return the first symbol missing, or NULL. The driver exports
// every version of an entry point under its own name; cuda.h maps the API
// names to the versions taken here (cuMemAlloc to cuMemAlloc_v2 and so on,
// the unsuffixed ones being the 32-bit originals). cuDeviceGetUuid_v2 and
// cuEventElapsedTime_v2 are newer than some drivers (12.8 for the latter),
// so their first versions stand in.
#define GF_SYM(f, name, alt) if (!gf_sym(h, (void **)&a->f, name, alt)) return name

static const char *gf_load_driver(gfAPI *a, void *h) {
	GF_SYM(cuGetErrorName, "cuGetErrorName", NULL);
	GF_SYM(cuInit, "cuInit", NULL);
	GF_SYM(cuDriverGetVersion, "cuDriverGetVersion", NULL);
	GF_SYM(cuDeviceGetCount, "cuDeviceGetCount", NULL);
	GF_SYM(cuDeviceGet, "cuDeviceGet", NULL);
	GF_SYM(cuDeviceGetName, "cuDeviceGetName", NULL);
	GF_SYM(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
	GF_SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL);
	GF_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	GF_SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", NULL);
	GF_SYM(cuCtxSetCurrent, "cuCtxSetCurrent", NULL);
	GF_SYM(cuCtxSynchronize, "cuCtxSynchronize", NULL);
	GF_SYM(cuMemGetInfo, "cuMemGetInfo_v2", NULL);
	GF_SYM(cuMemAlloc, "cuMemAlloc_v2", NULL);
	GF_SYM(cuMemFree, "cuMemFree_v2", NULL);
	GF_SYM(cuMemHostAlloc, "cuMemHostAlloc", NULL);
	GF_SYM(cuMemFreeHost, "cuMemFreeHost", NULL);
	GF_SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL);
	GF_SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL);
	GF_SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL);
	GF_SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL);
	GF_SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL);
	GF_SYM(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", NULL);
	GF_SYM(cuMemsetD8, "cuMemsetD8_v2", NULL);
	GF_SYM(cuMemsetD32, "cuMemsetD32_v2", NULL);
	GF_SYM(cuStreamCreate, "cuStreamCreate", NULL);
	GF_SYM(cuStreamDestroy, "cuStreamDestroy_v2", NULL);
	GF_SYM(cuStreamSynchronize, "cuStreamSynchronize", NULL);
	GF_SYM(cuEventCreate, "cuEventCreate", NULL);
	GF_SYM(cuEventDestroy, "cuEventDestroy_v2", NULL);
	GF_SYM(cuEventRecord, "cuEventRecord", NULL);
	GF_SYM(cuEventSynchronize, "cuEventSynchronize", NULL);
	GF_SYM(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	GF_SYM(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", NULL);
	GF_SYM(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", NULL);
	GF_SYM(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", NULL);
	return NULL;
}

static const char *gf_load_cublaslt(gfAPI *a, void *h) {
	GF_SYM(cublasLtCreate, "cublasLtCreate", NULL);
	GF_SYM(cublasLtDestroy, "cublasLtDestroy", NULL);
	GF_SYM(cublasLtGetStatusName, "cublasLtGetStatusName", NULL);
	GF_SYM(cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate", NULL);
	GF_SYM(cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy", NULL);
	GF_SYM(cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", NULL);
	GF_SYM(cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate", NULL);
	GF_SYM(cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", NULL);
	GF_SYM(cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate", NULL);
	GF_SYM(cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy", NULL);
	GF_SYM(cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", NULL);
	GF_SYM(cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", NULL);
	GF_SYM(cublasLtMatmul, "cublasLtMatmul", NULL);
	return NULL;
}

static const char *gf_load_nccl(gfAPI *a, void *h) {
	GF_SYM(ncclCommInitAll, "ncclCommInitAll", NULL);
	GF_SYM(ncclGetUniqueId, "ncclGetUniqueId", NULL);
	GF_SYM(ncclCommInitRank, "ncclCommInitRank", NULL);
	GF_SYM(ncclCommDestroy, "ncclCommDestroy", NULL);
	GF_SYM(ncclAllReduce, "ncclAllReduce", NULL);
	GF_SYM(ncclGroupStart, "ncclGroupStart", NULL);
	GF_SYM(ncclGroupEnd, "ncclGroupEnd", NULL);
	GF_SYM(ncclGetErrorString, "ncclGetErrorString", NULL);
	return NULL;
}

// Trampolines: cgo cannot call through a function pointer.
static CUresult gf_cuGetErrorName(gfAPI *a, CUresult r, const char **s) { return a->cuGetErrorName(r, s); }
static CUresult gf_cuInit(gfAPI *a) { return a->cuInit(0); }
static CUresult gf_cuDriverGetVersion(gfAPI *a, int *v) { return a->cuDriverGetVersion(v); }
static CUresult gf_cuDeviceGetCount(gfAPI *a, int *n) { return a->cuDeviceGetCount(n); }
static CUresult gf_cuDeviceGet(gfAPI *a, CUdevice *d, int ordinal) { return a->cuDeviceGet(d, ordinal); }
static CUresult gf_cuDeviceGetName(gfAPI *a, char *s, int n, CUdevice d) { return a->cuDeviceGetName(s, n, d); }
static CUresult gf_cuDeviceGetUuid(gfAPI *a, CUuuid *u, CUdevice d) { return a->cuDeviceGetUuid(u, d); }
static CUresult gf_cuDeviceGetAttribute(gfAPI *a, int *v, int attr, CUdevice d) { return a->cuDeviceGetAttribute(v, attr, d); }
static CUresult gf_cuDevicePrimaryCtxRetain(gfAPI *a, CUcontext *c, CUdevice d) { return a->cuDevicePrimaryCtxRetain(c, d); }
static CUresult gf_cuDevicePrimaryCtxRelease(gfAPI *a, CUdevice d) { return a->cuDevicePrimaryCtxRelease(d); }
static CUresult gf_cuCtxSetCurrent(gfAPI *a, CUcontext c) { return a->cuCtxSetCurrent(c); }
static CUresult gf_cuCtxSynchronize(gfAPI *a) { return a->cuCtxSynchronize(); }
static CUresult gf_cuMemGetInfo(gfAPI *a, size_t *free, size_t *total) { return a->cuMemGetInfo(free, total); }
static CUresult gf_cuMemAlloc(gfAPI *a, CUdeviceptr *p, size_t n) { return a->cuMemAlloc(p, n); }
static CUresult gf_cuMemFree(gfAPI *a, CUdeviceptr p) { return a->cuMemFree(p); }
static CUresult gf_cuMemHostAlloc(gfAPI *a, void **p, size_t n) { return a->cuMemHostAlloc(p, n, 0); }
static CUresult gf_cuMemFreeHost(gfAPI *a, void *p) { return a->cuMemFreeHost(p); }
static CUresult gf_cuMemcpyHtoD(gfAPI *a, CUdeviceptr d, const void *h, size_t n) { return a->cuMemcpyHtoD(d, h, n); }
static CUresult gf_cuMemcpyDtoH(gfAPI *a, void *h, CUdeviceptr d, size_t n) { return a->cuMemcpyDtoH(h, d, n); }
static CUresult gf_cuMemcpyHtoDAsync(gfAPI *a, CUdeviceptr d, const void *h, size_t n, CUstream s) { return a->cuMemcpyHtoDAsync(d, h, n, s); }
static CUresult gf_cuMemcpyDtoHAsync(gfAPI *a, void *h, CUdeviceptr d, size_t n, CUstream s) { return a->cuMemcpyDtoHAsync(h, d, n, s); }
static CUresult gf_cuMemcpyDtoDAsync(gfAPI *a, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return a->cuMemcpyDtoDAsync(dst, src, n, s); }
static CUresult gf_cuMemcpyPeerAsync(gfAPI *a, CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s) { return a->cuMemcpyPeerAsync(dst, dc, src, sc, n, s); }
static CUresult gf_cuMemsetD8(gfAPI *a, CUdeviceptr p, unsigned char v, size_t n) { return a->cuMemsetD8(p, v, n); }
static CUresult gf_cuMemsetD32(gfAPI *a, CUdeviceptr p, unsigned int v, size_t n) { return a->cuMemsetD32(p, v, n); }
static CUresult gf_cuStreamCreate(gfAPI *a, CUstream *s) { return a->cuStreamCreate(s, 0); }
static CUresult gf_cuStreamDestroy(gfAPI *a, CUstream s) { return a->cuStreamDestroy(s); }
static CUresult gf_cuStreamSynchronize(gfAPI *a, CUstream s) { return a->cuStreamSynchronize(s); }
static CUresult gf_cuEventCreate(gfAPI *a, CUevent *e) { return a->cuEventCreate(e, 0); }
static CUresult gf_cuEventDestroy(gfAPI *a, CUevent e) { return a->cuEventDestroy(e); }
static CUresult gf_cuEventRecord(gfAPI *a, CUevent e, CUstream s) { return a->cuEventRecord(e, s); }
static CUresult gf_cuEventSynchronize(gfAPI *a, CUevent e) { return a->cuEventSynchronize(e); }
static CUresult gf_cuEventElapsedTime(gfAPI *a, float *ms, CUevent start, CUevent stop) { return a->cuEventElapsedTime(ms, start, stop); }
static CUresult gf_cuDeviceCanAccessPeer(gfAPI *a, int *can, CUdevice d, CUdevice peer) { return a->cuDeviceCanAccessPeer(can, d, peer); }
static CUresult gf_cuCtxEnablePeerAccess(gfAPI *a, CUcontext peer) { return a->cuCtxEnablePeerAccess(peer, 0); }
static CUresult gf_cuCtxDisablePeerAccess(gfAPI *a, CUcontext peer) { return a->cuCtxDisablePeerAccess(peer); }

static cublasStatus_t gf_cublasLtCreate(gfAPI *a, cublasLtHandle_t *h) { return a->cublasLtCreate(h); }
static cublasStatus_t gf_cublasLtDestroy(gfAPI *a, cublasLtHandle_t h) { return a->cublasLtDestroy(h); }
static const char *gf_cublasLtGetStatusName(gfAPI *a, cublasStatus_t s) { return a->cublasLtGetStatusName(s); }
static cublasStatus_t gf_cublasLtMatmulDescCreate(gfAPI *a, cublasLtMatmulDesc_t *d, int compute, int scale) { return a->cublasLtMatmulDescCreate(d, compute, scale); }
static cublasStatus_t gf_cublasLtMatmulDescDestroy(gfAPI *a, cublasLtMatmulDesc_t d) { return a->cublasLtMatmulDescDestroy(d); }
static cublasStatus_t gf_cublasLtMatmulDescSetInt32(gfAPI *a, cublasLtMatmulDesc_t d, int attr, int32_t v) { return a->cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v); }
static cublasStatus_t gf_cublasLtMatrixLayoutCreate(gfAPI *a, cublasLtMatrixLayout_t *l, int type, uint64_t rows, uint64_t cols, int64_t ld) { return a->cublasLtMatrixLayoutCreate(l, type, rows, cols, ld); }
static cublasStatus_t gf_cublasLtMatrixLayoutDestroy(gfAPI *a, cublasLtMatrixLayout_t l) { return a->cublasLtMatrixLayoutDestroy(l); }
static cublasStatus_t gf_cublasLtMatmulPreferenceCreate(gfAPI *a, cublasLtMatmulPreference_t *p) { return a->cublasLtMatmulPreferenceCreate(p); }
static cublasStatus_t gf_cublasLtMatmulPreferenceDestroy(gfAPI *a, cublasLtMatmulPreference_t p) { return a->cublasLtMatmulPreferenceDestroy(p); }
static cublasStatus_t gf_cublasLtMatmulPreferenceSetUint64(gfAPI *a, cublasLtMatmulPreference_t p, int attr, uint64_t v) { return a->cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof v); }
static cublasStatus_t gf_cublasLtMatmulAlgoGetHeuristic(gfAPI *a, cublasLtHandle_t h, cublasLtMatmulDesc_t d,
		cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
		cublasLtMatmulPreference_t p, cublasLtMatmulHeuristicResult_t *res, int *n) {
	return a->cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, ld, p, 1, res, n);
}
// gf_cublasLtMatmul computes D = alpha op(A) op(B) + beta C with C = D.
static cublasStatus_t gf_cublasLtMatmul(gfAPI *a, cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
		CUdeviceptr A, cublasLtMatrixLayout_t la, CUdeviceptr B, cublasLtMatrixLayout_t lb, const void *beta,
		CUdeviceptr D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, CUdeviceptr ws, size_t wsSize, CUstream s) {
	return a->cublasLtMatmul(h, d, alpha, (const void *)A, la, (const void *)B, lb, beta,
		(const void *)D, ld, (void *)D, ld, algo, (void *)ws, wsSize, s);
}

static ncclResult_t gf_ncclCommInitAll(gfAPI *a, ncclComm_t *comms, int n, const int *devs) { return a->ncclCommInitAll(comms, n, devs); }
static ncclResult_t gf_ncclGetUniqueId(gfAPI *a, char *out) {
	gfNcclUniqueId id;
	ncclResult_t r = a->ncclGetUniqueId(&id);
	memcpy(out, id.internal, GF_NCCL_UNIQUE_ID_BYTES);
	return r;
}
static ncclResult_t gf_ncclCommInitRank(gfAPI *a, ncclComm_t *c, int n, const char *idb, int rank) {
	gfNcclUniqueId id;
	memcpy(id.internal, idb, GF_NCCL_UNIQUE_ID_BYTES);
	return a->ncclCommInitRank(c, n, id, rank);
}
static ncclResult_t gf_ncclCommDestroy(gfAPI *a, ncclComm_t c) { return a->ncclCommDestroy(c); }
static ncclResult_t gf_ncclAllReduceSum(gfAPI *a, CUdeviceptr send, CUdeviceptr recv, size_t count, ncclComm_t c, CUstream s) {
	return a->ncclAllReduce((const void *)send, (void *)recv, count, ncclFloat32, ncclSum, c, s);
}
static ncclResult_t gf_ncclGroupStart(gfAPI *a) { return a->ncclGroupStart(); }
static ncclResult_t gf_ncclGroupEnd(gfAPI *a) { return a->ncclGroupEnd(); }
static const char *gf_ncclGetErrorString(gfAPI *a, ncclResult_t r) { return a->ncclGetErrorString(r); }
*/
import "C"

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var _ bench.Backend = (*Backend)(nil)

// cgoBuild reports that this build loads the libraries.
const cgoBuild = true

// Backend measures NVIDIA GPUs through the CUDA driver API, cuBLASLt and
// NCCL, loaded at run time. Measure and Close may be called from any
// goroutine; calls are serialised.
type Backend struct {
	mu sync.Mutex
	// wedged says why the backend can measure no more: an all-reduce
	// across nodes whose peers never joined still blocks in NCCL's
	// initialization, holding mu, until the agent restarts.
	wedged  atomic.Pointer[string]
	api     *C.gfAPI // nil once closed
	nccl    bool     // NCCL loaded
	noNCCL  string   // why NCCL is not loaded
	devices []*device
}

// device is one CUDA device.
type device struct {
	ordinal int
	dev     C.CUdevice
	// index is the NVML index when Open had devs, else the CUDA ordinal;
	// -1 for a CUDA device NVML did not list (a MIG instance, say).
	index int
	uuid  string
	model string
	cc    gpufleet.ComputeCapability
	ctx   C.CUcontext // the retained primary context; nil until first used
}

// Open loads libcuda.so.1 (driver API), cuBLASLt and NCCL, from libDir
// first when it is not empty, then the loader's default paths. devs, when
// not nil, are the node's GPUs as NVML discovered them: a CUDA device is
// matched to one by UUID (cuDeviceGetUuid's 16 bytes formatted as NVML
// does: "GPU-" and the bytes in lower-case hex grouped 8-4-4-4-12), and measurements carry
// its NVML index, UUID and Model; without devs, CUDA's ordinal, that UUID
// and the CUDA device name are used. A missing libcuda or cuBLASLt, or
// cuInit failing, is an error wrapping gpu.ErrUnavailable naming the
// library/call and the directories searched. A missing NCCL is not an
// error at Open: the allreduce test is then skipped with a progress line
// saying why.
func Open(libDir string, devs []gpu.Device) (*Backend, error) {
	api := (*C.gfAPI)(C.calloc(1, C.sizeof_gfAPI))
	if api == nil {
		return nil, errors.New("cuda bench: out of memory")
	}
	b := &Backend{api: api}
	if err := b.open(libDir, devs); err != nil {
		return nil, errors.Join(err, b.release())
	}
	return b, nil
}

// open loads the libraries (they stay loaded for the life of the process)
// and lists the devices.
func (b *Backend) open(libDir string, devs []gpu.Device) error {
	h, path, err := loadLibrary(libDir, driverLibs)
	if err != nil {
		return fmt.Errorf("%w: cuda bench: the CUDA driver: %w", gpu.ErrUnavailable, err)
	}
	if missing := C.gf_load_driver(b.api, h); missing != nil {
		return fmt.Errorf("%w: cuda bench: %s has no %s (driver too old?)", gpu.ErrUnavailable, path, C.GoString(missing))
	}
	driver := path
	var version C.int // 1000 major + 10 minor; 0 when unknown
	if err := b.cu(C.gf_cuDriverGetVersion(b.api, &version), "cuDriverGetVersion"); err != nil {
		version = 0
	}
	h, path, err = loadLibrary(libDir, cublasLtFor(int(version)))
	if err != nil {
		return fmt.Errorf("%w: cuda bench: cuBLASLt for the driver's CUDA %s: %w", gpu.ErrUnavailable, cudaVersion(int(version)), err)
	}
	if missing := C.gf_load_cublaslt(b.api, h); missing != nil {
		return fmt.Errorf("%w: cuda bench: %s has no %s", gpu.ErrUnavailable, path, C.GoString(missing))
	}
	if h, path, err := loadLibrary(libDir, ncclLibs); err != nil {
		b.noNCCL = "NCCL not loaded: " + err.Error()
	} else if missing := C.gf_load_nccl(b.api, h); missing != nil {
		b.noNCCL = fmt.Sprintf("NCCL not loaded: %s has no %s", path, C.GoString(missing))
	} else {
		b.nccl = true
	}
	if err := b.cu(C.gf_cuInit(b.api), "cuInit"); err != nil {
		return fmt.Errorf("%w: cuda bench: %w (driver %s, searched %s)", gpu.ErrUnavailable, err, driver, searched(libDir))
	}
	return b.listDevices(devs)
}

// loadLibrary dlopens the first of names that loads, looking in dir first.
// The error names the libraries, where they were looked for and the first
// reason the loader gave.
func loadLibrary(dir string, names []string) (unsafe.Pointer, string, error) {
	var first string
	for _, p := range libraryPaths(dir, names) {
		cp := C.CString(p)
		var msg [512]C.char
		h := C.gf_open(cp, &msg[0], C.size_t(len(msg)))
		C.free(unsafe.Pointer(cp))
		if h != nil {
			return h, p, nil
		}
		if first == "" {
			first = C.GoString(&msg[0])
		}
	}
	return nil, "", fmt.Errorf("none of %s loads from %s: %s", strings.Join(names, ", "), searched(dir), first)
}

// libraryLoads reports whether the loader finds name (tests).
func libraryLoads(name string) bool {
	_, _, err := loadLibrary("", []string{name})
	return err == nil
}

// listDevices reads every CUDA device and matches it to devs.
func (b *Backend) listDevices(devs []gpu.Device) error {
	var n C.int
	if err := b.cu(C.gf_cuDeviceGetCount(b.api, &n), "cuDeviceGetCount"); err != nil {
		return fmt.Errorf("cuda bench: %w", err)
	}
	for ord := range int(n) {
		d, err := b.readDevice(ord)
		if err != nil {
			return fmt.Errorf("cuda bench: device %d: %w", ord, err)
		}
		if devs != nil {
			d.index = -1
			for _, g := range devs {
				if strings.EqualFold(g.UUID, d.uuid) {
					d.index = g.Index
					d.model = cmp.Or(g.Model, g.Name, d.model)
				}
			}
		}
		b.devices = append(b.devices, d)
	}
	slices.SortStableFunc(b.devices, func(x, y *device) int { return x.index - y.index })
	return nil
}

// readDevice reads CUDA device ord's UUID, name and compute capability.
func (b *Backend) readDevice(ord int) (*device, error) {
	d := &device{ordinal: ord, index: ord}
	if err := b.cu(C.gf_cuDeviceGet(b.api, &d.dev, C.int(ord)), "cuDeviceGet"); err != nil {
		return nil, err
	}
	var u C.CUuuid
	if err := b.cu(C.gf_cuDeviceGetUuid(b.api, &u, d.dev), "cuDeviceGetUuid"); err != nil {
		return nil, err
	}
	var raw [16]byte
	for i := range raw {
		raw[i] = byte(u.bytes[i])
	}
	d.uuid = formatUUID(raw)
	var name [256]C.char
	if err := b.cu(C.gf_cuDeviceGetName(b.api, &name[0], C.int(len(name)), d.dev), "cuDeviceGetName"); err != nil {
		return nil, err
	}
	d.model = C.GoString(&name[0])
	var major, minor C.int
	if err := b.cu(C.gf_cuDeviceGetAttribute(b.api, &major, C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.dev), "cuDeviceGetAttribute"); err != nil {
		return nil, err
	}
	if err := b.cu(C.gf_cuDeviceGetAttribute(b.api, &minor, C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.dev), "cuDeviceGetAttribute"); err != nil {
		return nil, err
	}
	d.cc = gpufleet.ComputeCapability{Major: int(major), Minor: int(minor)}
	return d, nil
}

// Close releases contexts and handles (not the libraries).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.release()
}

// release drops the retained primary contexts and frees the entry points.
func (b *Backend) release() error {
	if b.api == nil {
		return nil
	}
	var errs []error
	for _, d := range b.devices {
		if d.ctx != nil {
			errs = append(errs, b.cu(C.gf_cuDevicePrimaryCtxRelease(b.api, d.dev), "cuDevicePrimaryCtxRelease"))
			d.ctx = nil
		}
	}
	C.free(unsafe.Pointer(b.api))
	b.api = nil
	return errors.Join(errs...)
}

// Measure implements bench.Backend. It measures each selected GPU in turn
// (copy, gemm, h2d), then the pairs (p2p) and the node (allreduce). A
// failure, a failed result check included, does not stop the rest: Measure
// returns what it measured together with every failure, joined, each
// naming the GPU, the figure and the call. Cancelling ctx stops it between
// runs.
func (b *Backend) Measure(ctx context.Context, o bench.Options, progress func(string)) (out []bench.Measurement, err error) {
	if why := b.wedged.Load(); why != nil {
		return nil, errors.New(*why)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.api == nil {
		return nil, errors.New("cuda bench: measure after close")
	}
	if progress == nil {
		progress = func(string) {}
	}
	for _, t := range []bench.Test{bench.Memory, bench.Stress} {
		if o.Wants(t) {
			// The pattern kernels and the watched sustained products are
			// the simulated backend's so far (docs/BENCH.md#levels).
			progress(fmt.Sprintf("%s: not measured by the CUDA backend yet", t))
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() { err = errors.Join(err, b.cu(C.gf_cuCtxSetCurrent(b.api, nil), "cuCtxSetCurrent")) }()
	var (
		errs []error
		sel  []*device
	)
	for _, d := range b.devices {
		switch {
		case d.index < 0:
			progress(fmt.Sprintf("cuda device %d (%s): not among the GPUs NVML lists, skipped", d.ordinal, d.uuid))
		case o.Selects(d.index):
			sel = append(sel, d)
		}
	}
	if len(sel) == 0 {
		progress("no CUDA device selected")
	}
	// record keeps a measurement or its failure; it reports whether to go on.
	record := func(what string, m []bench.Measurement, err error) bool {
		out = append(out, m...)
		if err != nil && ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			return false
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
		return true
	}
	var ready []*device // the selected devices with a context
	for _, d := range sel {
		gpuName := fmt.Sprintf("gpu %d", d.index)
		if err := b.use(d); err != nil { // a device without a context can do nothing
			errs = append(errs, fmt.Errorf("%s: %w", gpuName, err))
			continue
		}
		ready = append(ready, d)
		if o.Wants(bench.Copy) {
			m, err := b.measureCopy(ctx, d, o, progress)
			if !record(gpuName+": copy", one(m, err), err) {
				return out, errors.Join(errs...)
			}
		}
		if o.Wants(bench.GEMM) {
			for _, k := range gemmKinds {
				if !d.cc.AtLeast(k.minCC) {
					progress(fmt.Sprintf("%s: %s needs compute capability %s (has %s), skipped", gpuName, bench.GEMMName(k.p), k.minCC, d.cc))
					continue
				}
				m, err := b.measureGEMM(ctx, d, k, o, progress)
				if !record(gpuName+": "+bench.GEMMName(k.p), one(m, err), err) {
					return out, errors.Join(errs...)
				}
			}
			if d.cc.AtLeast(gpufleet.ComputeCapability{Major: 10}) {
				progress(gpuName + ": fp4 not measured yet")
			}
		}
		if o.Wants(bench.H2D) {
			ms, err := b.measureHostCopies(ctx, d, o, progress)
			if !record(gpuName+": h2d", ms, err) {
				return out, errors.Join(errs...)
			}
		}
	}
	if o.Wants(bench.P2P) {
		ms, err := b.measureP2P(ctx, ready, o, progress)
		if !record("p2p", ms, err) {
			return out, errors.Join(errs...)
		}
	}
	if o.Wants(bench.AllReduce) {
		ms, err := b.measureAllReduce(ctx, ready, o, progress)
		record("allreduce", ms, err)
	}
	return out, errors.Join(errs...)
}

// one turns a single measurement into a list: none when it failed.
func one(m bench.Measurement, err error) []bench.Measurement {
	if err != nil {
		return nil
	}
	return []bench.Measurement{m}
}

// cu turns a driver API status into an error naming the call.
func (b *Backend) cu(r C.CUresult, call string) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	var s *C.char
	if C.gf_cuGetErrorName(b.api, r, &s) != C.CUDA_SUCCESS || s == nil {
		return fmt.Errorf("%s: CUresult %d", call, int(r))
	}
	return fmt.Errorf("%s: %s", call, C.GoString(s))
}

// lt turns a cuBLASLt status into an error naming the call.
func (b *Backend) lt(r C.cublasStatus_t, call string) error {
	if r == C.CUBLAS_STATUS_SUCCESS {
		return nil
	}
	if s := C.gf_cublasLtGetStatusName(b.api, r); s != nil {
		return fmt.Errorf("%s: %s", call, C.GoString(s))
	}
	return fmt.Errorf("%s: cublasStatus_t %d", call, int(r))
}

// nc turns an NCCL result into an error naming the call.
func (b *Backend) nc(r C.ncclResult_t, call string) error {
	if r == C.ncclSuccess {
		return nil
	}
	if s := C.gf_ncclGetErrorString(b.api, r); s != nil {
		return fmt.Errorf("%s: %s (ncclResult_t %d)", call, C.GoString(s), int(r))
	}
	return fmt.Errorf("%s: ncclResult_t %d", call, int(r))
}

// use makes d's primary context current on this (locked) thread, retaining
// it on first use.
func (b *Backend) use(d *device) error {
	if d.ctx == nil {
		var c C.CUcontext
		if err := b.cu(C.gf_cuDevicePrimaryCtxRetain(b.api, &c, d.dev), "cuDevicePrimaryCtxRetain"); err != nil {
			return err
		}
		d.ctx = c
	}
	return b.cu(C.gf_cuCtxSetCurrent(b.api, d.ctx), "cuCtxSetCurrent")
}

// scope holds what a measurement allocated, to release in reverse order on
// every path, each with its device's context current.
type scope struct {
	b    *Backend
	undo []func() error
}

func (b *Backend) scope() *scope { return &scope{b: b} }

// on adds a release of something of device d.
func (sc *scope) on(d *device, release func() error) {
	sc.undo = append(sc.undo, func() error {
		if err := sc.b.use(d); err != nil {
			return err
		}
		return release()
	})
}

// close releases everything, returning the failures joined.
func (sc *scope) close() error {
	var errs []error
	for i := len(sc.undo) - 1; i >= 0; i-- {
		errs = append(errs, sc.undo[i]())
	}
	sc.undo = nil
	return errors.Join(errs...)
}

// closeInto releases the scope, adding any failure to *err.
func (sc *scope) closeInto(err *error) {
	if e := sc.close(); e != nil {
		*err = errors.Join(*err, e)
	}
}

// alloc allocates n bytes on d (current).
func (b *Backend) alloc(sc *scope, d *device, n int64) (C.CUdeviceptr, error) {
	var p C.CUdeviceptr
	if err := b.cu(C.gf_cuMemAlloc(b.api, &p, C.size_t(n)), fmt.Sprintf("cuMemAlloc %s", humanBytes(n))); err != nil {
		return 0, err
	}
	sc.on(d, func() error { return b.cu(C.gf_cuMemFree(b.api, p), "cuMemFree") })
	return p, nil
}

// hostAlloc allocates n bytes of pinned host memory with d current.
func (b *Backend) hostAlloc(sc *scope, d *device, n int64) ([]byte, error) {
	var p unsafe.Pointer
	if err := b.cu(C.gf_cuMemHostAlloc(b.api, &p, C.size_t(n)), fmt.Sprintf("cuMemHostAlloc %s", humanBytes(n))); err != nil {
		return nil, err
	}
	sc.on(d, func() error { return b.cu(C.gf_cuMemFreeHost(b.api, p), "cuMemFreeHost") })
	return unsafe.Slice((*byte)(p), n), nil
}

// stream creates a stream on d (current); it synchronizes with the legacy
// default stream, which the synchronous copies and memsets use. Its
// release waits for the work on it, so that what it used (allocated
// before it, released after it) is free to go even when a run failed.
func (b *Backend) stream(sc *scope, d *device) (C.CUstream, error) {
	var s C.CUstream
	if err := b.cu(C.gf_cuStreamCreate(b.api, &s), "cuStreamCreate"); err != nil {
		return nil, err
	}
	sc.on(d, func() error {
		return errors.Join(b.cu(C.gf_cuStreamSynchronize(b.api, s), "cuStreamSynchronize"),
			b.cu(C.gf_cuStreamDestroy(b.api, s), "cuStreamDestroy"))
	})
	return s, nil
}

// timer is a pair of events bracketing one run on a stream.
type timer struct {
	b           *Backend
	start, stop C.CUevent
}

// timer creates the events of a timer on d (current).
func (b *Backend) timer(sc *scope, d *device) (*timer, error) {
	t := &timer{b: b}
	for _, e := range []*C.CUevent{&t.start, &t.stop} {
		if err := b.cu(C.gf_cuEventCreate(b.api, e), "cuEventCreate"); err != nil {
			return nil, err
		}
		ev := *e
		sc.on(d, func() error { return b.cu(C.gf_cuEventDestroy(b.api, ev), "cuEventDestroy") })
	}
	return t, nil
}

func (t *timer) begin(s C.CUstream) error {
	return t.b.cu(C.gf_cuEventRecord(t.b.api, t.start, s), "cuEventRecord")
}

func (t *timer) end(s C.CUstream) error {
	return t.b.cu(C.gf_cuEventRecord(t.b.api, t.stop, s), "cuEventRecord")
}

// seconds waits for the run to end and returns its length.
func (t *timer) seconds() (float64, error) {
	if err := t.b.cu(C.gf_cuEventSynchronize(t.b.api, t.stop), "cuEventSynchronize"); err != nil {
		return 0, err
	}
	var ms C.float
	if err := t.b.cu(C.gf_cuEventElapsedTime(t.b.api, &ms, t.start, t.stop), "cuEventElapsedTime"); err != nil {
		return 0, err
	}
	if ms <= 0 {
		return 0, fmt.Errorf("cuEventElapsedTime: %g ms, not a time", float64(ms))
	}
	return float64(ms) / 1e3, nil
}

// timeRuns runs op warmups times, then runs timed times, each between the
// events of a timer on stream s of d (current); it returns each timed
// run's seconds. ctx is honoured between runs.
func (b *Backend) timeRuns(ctx context.Context, sc *scope, d *device, s C.CUstream, runs int, op func() error) ([]float64, error) {
	t, err := b.timer(sc, d)
	if err != nil {
		return nil, err
	}
	for range warmups {
		if err := op(); err != nil {
			return nil, err
		}
	}
	if err := b.cu(C.gf_cuStreamSynchronize(b.api, s), "cuStreamSynchronize"); err != nil {
		return nil, err
	}
	secs := make([]float64, 0, runs)
	for range runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := t.begin(s); err != nil {
			return nil, err
		}
		if err := op(); err != nil {
			return nil, err
		}
		if err := t.end(s); err != nil {
			return nil, err
		}
		sec, err := t.seconds()
		if err != nil {
			return nil, err
		}
		secs = append(secs, sec)
	}
	return secs, nil
}

// sync waits for everything on the current context.
func (b *Backend) sync() error { return b.cu(C.gf_cuCtxSynchronize(b.api), "cuCtxSynchronize") }

// checkedRun is the run a result check reads: the output poisoned after
// the timed runs (which would otherwise have left a right answer behind),
// op once, and a wait, so that a run that wrote nothing fails the check.
func (b *Backend) checkedRun(poison, op func() error) error {
	if err := poison(); err != nil {
		return err
	}
	if err := op(); err != nil {
		return err
	}
	return b.sync()
}

// poison fills n bytes at p with 0xFF (NaN in every float format, -1 as an
// int32, which the exact int8 comparison still catches) and
// waits, so that a result nobody wrote shows.
func (b *Backend) poison(p C.CUdeviceptr, n int64) error {
	if err := b.cu(C.gf_cuMemsetD8(b.api, p, 0xFF, C.size_t(n)), "cuMemsetD8"); err != nil {
		return err
	}
	return b.sync()
}

// upload copies host bytes to p.
func (b *Backend) upload(p C.CUdeviceptr, h []byte) error {
	return b.cu(C.gf_cuMemcpyHtoD(b.api, p, unsafe.Pointer(&h[0]), C.size_t(len(h))), "cuMemcpyHtoD")
}

// download copies len(h) bytes from p to the host.
func (b *Backend) download(h []byte, p C.CUdeviceptr) error {
	return b.cu(C.gf_cuMemcpyDtoH(b.api, unsafe.Pointer(&h[0]), p, C.size_t(len(h))), "cuMemcpyDtoH")
}

// fillDevice writes the pattern of seed into n bytes at p, through a host
// buffer of at most 64 MiB.
func (b *Backend) fillDevice(p C.CUdeviceptr, n int64, seed uint64) error {
	buf := make([]byte, min(n, 64*mib))
	for off := int64(0); off < n; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), n-off)]
		fillPattern(chunk, seed, off)
		if err := b.upload(p+C.CUdeviceptr(off), chunk); err != nil {
			return err
		}
	}
	return nil
}

// checkDevice compares sampled regions of the n bytes at p with the
// pattern of seed; it returns how many bytes it compared.
func (b *Backend) checkDevice(p C.CUdeviceptr, n int64, seed uint64) (int64, error) {
	buf := make([]byte, min(n, checkRegion))
	var compared int64
	for _, off := range sampleRegions(n, int64(len(buf)), checkRegions, rand.New(rand.NewPCG(seed, uint64(n)))) {
		if err := b.download(buf, p+C.CUdeviceptr(off)); err != nil {
			return compared, err
		}
		if bad := patternMismatch(buf, seed, off); bad >= 0 {
			return compared, fmt.Errorf("result check failed: byte %d differs from the source", bad)
		}
		compared += int64(len(buf))
	}
	return compared, nil
}

// measureCopy times a device-to-device copy of one large buffer into
// another.
func (b *Backend) measureCopy(ctx context.Context, d *device, o bench.Options, progress func(string)) (m bench.Measurement, err error) {
	sc := b.scope()
	defer sc.closeInto(&err)
	if err := b.use(d); err != nil {
		return m, err
	}
	var free, total C.size_t
	if err := b.cu(C.gf_cuMemGetInfo(b.api, &free, &total), "cuMemGetInfo"); err != nil {
		return m, err
	}
	size := 4 * gib
	if o.Quick || o.Level == bench.LevelQuick {
		size = gib
	}
	size = min(size, int64(free)/4/(256*mib)*(256*mib))
	if size == 0 {
		return m, fmt.Errorf("%s free: not enough memory for two 256 MiB buffers", humanBytes(int64(free)))
	}
	src, err := b.alloc(sc, d, size)
	if err != nil {
		return m, err
	}
	dst, err := b.alloc(sc, d, size)
	if err != nil {
		return m, err
	}
	seed := rand.Uint64()
	if err := b.fillDevice(src, size, seed); err != nil {
		return m, err
	}
	if err := b.poison(dst, size); err != nil {
		return m, err
	}
	s, err := b.stream(sc, d)
	if err != nil {
		return m, err
	}
	progress(fmt.Sprintf("gpu %d: copy %s x%d", d.index, humanBytes(size), o.Runs()))
	copyOnce := func() error {
		return b.cu(C.gf_cuMemcpyDtoDAsync(b.api, dst, src, C.size_t(size), s), "cuMemcpyDtoDAsync")
	}
	secs, err := b.timeRuns(ctx, sc, d, s, o.Runs(), copyOnce)
	if err != nil {
		return m, err
	}
	if err := b.checkedRun(func() error { return b.poison(dst, size) }, copyOnce); err != nil {
		return m, err
	}
	n, err := b.checkDevice(dst, size, seed)
	if err != nil {
		return m, err
	}
	return bench.Measurement{Name: "copy", Test: bench.Copy, GPU: d.index, UUID: d.uuid, Model: d.model, GPUs: 1,
		Size: humanBytes(size), Unit: bench.BytesPerS, Rates: rates(2*float64(size), secs),
		Check: fmt.Sprintf("%d sampled bytes equal", n)}, nil
}

// ltTypes are the cuBLASLt types of a product: A's and B's, C's and D's,
// the compute type and the scale type (alpha's and beta's).
func ltTypes(p gpufleet.Precision) (ab, cd, compute, scale C.int) {
	switch p {
	case gpufleet.FP64:
		return C.CUDA_R_64F, C.CUDA_R_64F, C.CUBLAS_COMPUTE_64F, C.CUDA_R_64F
	case gpufleet.FP32:
		return C.CUDA_R_32F, C.CUDA_R_32F, C.CUBLAS_COMPUTE_32F, C.CUDA_R_32F
	case gpufleet.TF32:
		return C.CUDA_R_32F, C.CUDA_R_32F, C.CUBLAS_COMPUTE_32F_FAST_TF32, C.CUDA_R_32F
	case gpufleet.BF16:
		return C.CUDA_R_16BF, C.CUDA_R_16BF, C.CUBLAS_COMPUTE_32F, C.CUDA_R_32F
	case gpufleet.FP16:
		return C.CUDA_R_16F, C.CUDA_R_16F, C.CUBLAS_COMPUTE_32F, C.CUDA_R_32F
	case gpufleet.FP8:
		return C.CUDA_R_8F_E4M3, C.CUDA_R_16BF, C.CUBLAS_COMPUTE_32F, C.CUDA_R_32F
	}
	return C.CUDA_R_8I, C.CUDA_R_32I, C.CUBLAS_COMPUTE_32I, C.CUDA_R_32I // int8
}

// scalars are alpha = 1 and beta = 0 in the scale type, as host bytes.
func scalars(scale C.int) (alpha, beta [8]byte) {
	switch scale {
	case C.CUDA_R_64F:
		binary.NativeEndian.PutUint64(alpha[:], math.Float64bits(1))
	case C.CUDA_R_32F:
		binary.NativeEndian.PutUint32(alpha[:], math.Float32bits(1))
	default:
		binary.NativeEndian.PutUint32(alpha[:], 1)
	}
	return alpha, beta
}

// matmul is one cuBLASLt product D = op(A) op(B), ready to run.
type matmul struct {
	b           *Backend
	h           C.cublasLtHandle_t
	desc        C.cublasLtMatmulDesc_t
	la, lb, ld  C.cublasLtMatrixLayout_t
	algo        C.cublasLtMatmulAlgo_t
	alpha, beta [8]byte
	a, bm, dm   C.CUdeviceptr
	ws          C.CUdeviceptr
}

// newMatmul sets up an n x n x n product of kind k in the TN layout (op(A)
// = A transposed, op(B) = B: what fp8 and int8 need) with the first
// algorithm cuBLASLt's heuristic proposes.
func (b *Backend) newMatmul(sc *scope, d *device, k gemmKind, n int, a, bm, dm C.CUdeviceptr) (*matmul, error) {
	mm := &matmul{b: b, a: a, bm: bm, dm: dm}
	ab, cd, compute, scale := ltTypes(k.p)
	mm.alpha, mm.beta = scalars(scale)
	var err error
	if mm.ws, err = b.alloc(sc, d, workspaceSize); err != nil {
		return nil, err
	}
	if err := b.lt(C.gf_cublasLtCreate(b.api, &mm.h), "cublasLtCreate"); err != nil {
		return nil, err
	}
	sc.on(d, func() error { return b.lt(C.gf_cublasLtDestroy(b.api, mm.h), "cublasLtDestroy") })
	if err := b.lt(C.gf_cublasLtMatmulDescCreate(b.api, &mm.desc, compute, scale), "cublasLtMatmulDescCreate"); err != nil {
		return nil, err
	}
	sc.on(d, func() error { return b.lt(C.gf_cublasLtMatmulDescDestroy(b.api, mm.desc), "cublasLtMatmulDescDestroy") })
	if err := b.lt(C.gf_cublasLtMatmulDescSetInt32(b.api, mm.desc, C.CUBLASLT_MATMUL_DESC_TRANSA, C.CUBLAS_OP_T), "cublasLtMatmulDescSetAttribute TRANSA"); err != nil {
		return nil, err
	}
	if err := b.lt(C.gf_cublasLtMatmulDescSetInt32(b.api, mm.desc, C.CUBLASLT_MATMUL_DESC_TRANSB, C.CUBLAS_OP_N), "cublasLtMatmulDescSetAttribute TRANSB"); err != nil {
		return nil, err
	}
	// Column-major: A is k x m, B is k x n, D is m x n.
	for _, l := range []struct {
		out *C.cublasLtMatrixLayout_t
		typ C.int
	}{{&mm.la, ab}, {&mm.lb, ab}, {&mm.ld, cd}} {
		if err := b.lt(C.gf_cublasLtMatrixLayoutCreate(b.api, l.out, l.typ, C.uint64_t(n), C.uint64_t(n), C.int64_t(n)), "cublasLtMatrixLayoutCreate"); err != nil {
			return nil, err
		}
		layout := *l.out
		sc.on(d, func() error {
			return b.lt(C.gf_cublasLtMatrixLayoutDestroy(b.api, layout), "cublasLtMatrixLayoutDestroy")
		})
	}
	var pref C.cublasLtMatmulPreference_t
	if err := b.lt(C.gf_cublasLtMatmulPreferenceCreate(b.api, &pref), "cublasLtMatmulPreferenceCreate"); err != nil {
		return nil, err
	}
	sc.on(d, func() error {
		return b.lt(C.gf_cublasLtMatmulPreferenceDestroy(b.api, pref), "cublasLtMatmulPreferenceDestroy")
	})
	if err := b.lt(C.gf_cublasLtMatmulPreferenceSetUint64(b.api, pref, C.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, C.uint64_t(workspaceSize)), "cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES"); err != nil {
		return nil, err
	}
	var res C.cublasLtMatmulHeuristicResult_t
	var found C.int
	if err := b.lt(C.gf_cublasLtMatmulAlgoGetHeuristic(b.api, mm.h, mm.desc, mm.la, mm.lb, mm.ld, mm.ld, pref, &res, &found), "cublasLtMatmulAlgoGetHeuristic"); err != nil {
		return nil, err
	}
	if found < 1 || res.state != C.CUBLAS_STATUS_SUCCESS {
		return nil, errors.New("cublasLtMatmulAlgoGetHeuristic: no algorithm for this product")
	}
	mm.algo = res.algo
	return mm, nil
}

// run enqueues the product on s.
func (mm *matmul) run(s C.CUstream) error {
	b := mm.b
	return b.lt(C.gf_cublasLtMatmul(b.api, mm.h, mm.desc, unsafe.Pointer(&mm.alpha), mm.a, mm.la, mm.bm, mm.lb,
		unsafe.Pointer(&mm.beta), mm.dm, mm.ld, &mm.algo, mm.ws, C.size_t(workspaceSize), s), "cublasLtMatmul")
}

// measureGEMM times the products of kind k on d, then checks one against
// the float64 reference on sampled elements.
func (b *Backend) measureGEMM(ctx context.Context, d *device, k gemmKind, o bench.Options, progress func(string)) (m bench.Measurement, err error) {
	sc := b.scope()
	defer sc.closeInto(&err)
	if err := b.use(d); err != nil {
		return m, err
	}
	n, reps := k.shape(o.Quick || o.Level == bench.LevelQuick)
	ha, hb := make([]byte, n*n*k.in), make([]byte, n*n*k.in)
	k.fillMatrix(ha, rand.Uint64())
	k.fillMatrix(hb, rand.Uint64())
	var dev [3]C.CUdeviceptr
	for i, size := range []int{len(ha), len(hb), n * n * k.out} {
		if dev[i], err = b.alloc(sc, d, int64(size)); err != nil {
			return m, err
		}
	}
	if err := b.upload(dev[0], ha); err != nil {
		return m, err
	}
	if err := b.upload(dev[1], hb); err != nil {
		return m, err
	}
	mm, err := b.newMatmul(sc, d, k, n, dev[0], dev[1], dev[2])
	if err != nil {
		return m, err
	}
	s, err := b.stream(sc, d)
	if err != nil {
		return m, err
	}
	progress(fmt.Sprintf("gpu %d: %s %s x%d", d.index, bench.GEMMName(k.p), gemmSize(n, reps), o.Runs()))
	secs, err := b.timeRuns(ctx, sc, d, s, o.Runs(), func() error {
		for range reps {
			if err := mm.run(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	check, err := b.checkGEMM(mm, s, k, n, ha, hb)
	if err != nil {
		return m, err
	}
	return bench.Measurement{Name: bench.GEMMName(k.p), Test: bench.GEMM, Precision: k.p, GPU: d.index, UUID: d.uuid,
		Model: d.model, GPUs: 1, Size: gemmSize(n, reps), Unit: bench.GEMMUnit(k.p),
		Rates: rates(float64(reps)*2*math.Pow(float64(n), 3), secs), Check: check}, nil
}

// checkGEMM poisons D, runs one product, and compares sampled elements of
// D with the float64 reference of the inputs ha and hb.
func (b *Backend) checkGEMM(mm *matmul, s C.CUstream, k gemmKind, n int, ha, hb []byte) (string, error) {
	if err := b.poison(mm.dm, int64(n*n*k.out)); err != nil {
		return "", err
	}
	if err := mm.run(s); err != nil {
		return "", err
	}
	if err := b.cu(C.gf_cuStreamSynchronize(b.api, s), "cuStreamSynchronize"); err != nil {
		return "", err
	}
	out, ref := make([]float64, gemmSamples), make([]float64, gemmSamples)
	elem := make([]byte, k.out)
	r := rand.New(rand.NewPCG(rand.Uint64(), 0))
	for x := range gemmSamples {
		i, j := r.IntN(n), r.IntN(n)
		if err := b.download(elem, mm.dm+C.CUdeviceptr((i+j*n)*k.out)); err != nil {
			return "", err
		}
		out[x], ref[x] = k.decodeOutput(elem, 0), k.refDot(ha, hb, n, i, j)
	}
	e := relErr(out, ref)
	text := checkText(e, gemmSamples, k.limit)
	if !passes(e, k.limit) {
		return "", fmt.Errorf("result check failed: %s", text)
	}
	return text, nil
}

// measureHostCopies times copies between pinned host memory and d, both
// ways.
func (b *Backend) measureHostCopies(ctx context.Context, d *device, o bench.Options, progress func(string)) (ms []bench.Measurement, err error) {
	sc := b.scope()
	defer sc.closeInto(&err)
	if err := b.use(d); err != nil {
		return nil, err
	}
	size := gib
	if o.Quick || o.Level == bench.LevelQuick {
		size = 256 * mib
	}
	host, err := b.hostAlloc(sc, d, size)
	if err != nil {
		return nil, err
	}
	dev, err := b.alloc(sc, d, size)
	if err != nil {
		return nil, err
	}
	seed := rand.Uint64()
	fillPattern(host, seed, 0)
	if err := b.poison(dev, size); err != nil {
		return nil, err
	}
	s, err := b.stream(sc, d)
	if err != nil {
		return nil, err
	}
	hp := unsafe.Pointer(&host[0])
	measurement := func(name string, secs []float64, n int64) bench.Measurement {
		return bench.Measurement{Name: name, Test: bench.H2D, GPU: d.index, UUID: d.uuid, Model: d.model, GPUs: 1,
			Size: humanBytes(size), Unit: bench.BytesPerS, Rates: rates(float64(size), secs),
			Check: fmt.Sprintf("%d sampled bytes equal", n)}
	}

	progress(fmt.Sprintf("gpu %d: h2d %s x%d", d.index, humanBytes(size), o.Runs()))
	h2dOnce := func() error {
		return b.cu(C.gf_cuMemcpyHtoDAsync(b.api, dev, hp, C.size_t(size), s), "cuMemcpyHtoDAsync")
	}
	secs, err := b.timeRuns(ctx, sc, d, s, o.Runs(), h2dOnce)
	if err != nil {
		return nil, err
	}
	if err := b.checkedRun(func() error { return b.poison(dev, size) }, h2dOnce); err != nil {
		return nil, fmt.Errorf("h2d: %w", err)
	}
	n, err := b.checkDevice(dev, size, seed)
	if err != nil {
		return nil, fmt.Errorf("h2d: %w", err)
	}
	ms = append(ms, measurement("h2d", secs, n))

	// Poison sampled regions of the host buffer; the checked copy back
	// must restore them.
	regions := sampleRegions(size, checkRegion, checkRegions, rand.New(rand.NewPCG(seed, 1)))
	poisonHost := func() error {
		for _, off := range regions {
			r := host[off : off+checkRegion]
			for i := range r {
				r[i] = 0xFF
			}
		}
		return nil
	}
	progress(fmt.Sprintf("gpu %d: d2h %s x%d", d.index, humanBytes(size), o.Runs()))
	d2hOnce := func() error {
		return b.cu(C.gf_cuMemcpyDtoHAsync(b.api, hp, dev, C.size_t(size), s), "cuMemcpyDtoHAsync")
	}
	secs, err = b.timeRuns(ctx, sc, d, s, o.Runs(), d2hOnce)
	if err != nil {
		return ms, fmt.Errorf("d2h: %w", err)
	}
	if err := b.checkedRun(poisonHost, d2hOnce); err != nil {
		return ms, fmt.Errorf("d2h: %w", err)
	}
	for _, off := range regions {
		if bad := patternMismatch(host[off:off+checkRegion], seed, off); bad >= 0 {
			return ms, fmt.Errorf("d2h: result check failed: byte %d differs from the source", bad)
		}
	}
	return append(ms, measurement("d2h", secs, int64(len(regions))*checkRegion)), nil
}

// peerBuffers are one GPU's source, filled with its pattern, and
// destination for the p2p copies.
type peerBuffers struct {
	src, dst C.CUdeviceptr
	seed     uint64
}

// measureP2P times a copy for every ordered pair of the GPUs ds.
func (b *Backend) measureP2P(ctx context.Context, ds []*device, o bench.Options, progress func(string)) (ms []bench.Measurement, err error) {
	if len(ds) < 2 {
		progress("p2p needs at least 2 GPUs, skipped")
		return nil, nil
	}
	sc := b.scope()
	defer sc.closeInto(&err)
	size := gib
	if o.Quick || o.Level == bench.LevelQuick {
		size = 256 * mib
	}
	bufs := make([]peerBuffers, len(ds))
	for i, d := range ds {
		if err := b.use(d); err != nil {
			return nil, err
		}
		bufs[i].seed = rand.Uint64()
		if bufs[i].src, err = b.alloc(sc, d, size); err != nil {
			return nil, err
		}
		if bufs[i].dst, err = b.alloc(sc, d, size); err != nil {
			return nil, err
		}
		if err := b.fillDevice(bufs[i].src, size, bufs[i].seed); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, pair := range o.Pairs(len(ds)) {
		i, j := pair[0], pair[1]
		from, to := ds[i], ds[j]
		m, err := b.measurePair(ctx, from, to, bufs[i], bufs[j], size, o, progress)
		if err != nil {
			if ctx.Err() != nil {
				return ms, err
			}
			errs = append(errs, fmt.Errorf("gpu %d to %d: %w", from.index, to.index, err))
			continue
		}
		ms = append(ms, m)
	}
	return ms, errors.Join(errs...)
}

// measurePair times copies from from's source to to's destination on a
// stream of from, with peer access where the devices allow it.
func (b *Backend) measurePair(ctx context.Context, from, to *device, src, dst peerBuffers, size int64, o bench.Options, progress func(string)) (m bench.Measurement, err error) {
	sc := b.scope()
	defer sc.closeInto(&err)
	if err := b.use(to); err != nil { // retains to's context
		return m, err
	}
	if err := b.poison(dst.dst, size); err != nil {
		return m, err
	}
	if err := b.use(from); err != nil {
		return m, err
	}
	var can C.int
	if err := b.cu(C.gf_cuDeviceCanAccessPeer(b.api, &can, from.dev, to.dev), "cuDeviceCanAccessPeer"); err != nil {
		return m, err
	}
	route := "through host"
	if can != 0 {
		route = "direct"
		switch r := C.gf_cuCtxEnablePeerAccess(b.api, to.ctx); r {
		case C.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: // someone else's; leave it
		default:
			if err := b.cu(r, "cuCtxEnablePeerAccess"); err != nil {
				return m, err
			}
			sc.on(from, func() error { return b.cu(C.gf_cuCtxDisablePeerAccess(b.api, to.ctx), "cuCtxDisablePeerAccess") })
		}
	}
	s, err := b.stream(sc, from)
	if err != nil {
		return m, err
	}
	progress(fmt.Sprintf("gpu %d to %d: p2p %s %s x%d", from.index, to.index, humanBytes(size), route, o.Runs()))
	pairOnce := func() error {
		return b.cu(C.gf_cuMemcpyPeerAsync(b.api, dst.dst, to.ctx, src.src, from.ctx, C.size_t(size), s), "cuMemcpyPeerAsync")
	}
	secs, err := b.timeRuns(ctx, sc, from, s, o.Runs(), pairOnce)
	if err != nil {
		return m, err
	}
	poisonDst := func() error { // on to's context, then back on from's
		if err := b.use(to); err != nil {
			return err
		}
		if err := b.poison(dst.dst, size); err != nil {
			return err
		}
		return b.use(from)
	}
	if err := b.checkedRun(poisonDst, pairOnce); err != nil {
		return m, err
	}
	if err := b.use(to); err != nil {
		return m, err
	}
	n, err := b.checkDevice(dst.dst, size, src.seed)
	if err != nil {
		return m, err
	}
	peer := to.index
	return bench.Measurement{Name: "p2p", Test: bench.P2P, GPU: from.index, UUID: from.uuid, Model: from.model, Peer: &peer,
		GPUs: 1, Size: humanBytes(size) + ", " + route, Unit: bench.BytesPerS, Rates: rates(float64(size), secs),
		Check: fmt.Sprintf("%d sampled bytes equal", n)}, nil
}

// rank is one GPU's part of the all-reduce.
type rank struct {
	d          *device
	send, recv C.CUdeviceptr
	s          C.CUstream
	t          *timer
}

// measureAllReduce times a float32 sum all-reduce over the GPUs ds with
// NCCL, each rank contributing rank+1, and reports bus bandwidth.
func (b *Backend) measureAllReduce(ctx context.Context, ds []*device, o bench.Options, progress func(string)) ([]bench.Measurement, error) {
	switch {
	case !b.nccl:
		progress("allreduce skipped: " + b.noNCCL)
		return nil, nil
	case len(ds) < 2:
		progress("allreduce needs at least 2 GPUs, skipped")
		return nil, nil
	}
	ordinals := make([]C.int, len(ds))
	for i, d := range ds {
		ordinals[i] = C.int(d.ordinal)
	}
	initAll := func(comms []C.ncclComm_t) error {
		return b.nc(C.gf_ncclCommInitAll(b.api, &comms[0], C.int(len(ds)), &ordinals[0]), "ncclCommInitAll")
	}
	bus, size, check, err := b.allReduce(ctx, ds, o, progress, 0, len(ds), initAll)
	if err != nil {
		return nil, err
	}
	first := ds[0]
	return []bench.Measurement{{Name: "allreduce", Test: bench.AllReduce, GPU: first.index, UUID: first.uuid, Model: first.model,
		GPUs: len(ds), Size: humanBytes(size), Unit: bench.BytesPerS, Rates: bus, Check: check}}, nil
}

// allReduce times float32 sum all-reduces over this process's ranks ds,
// ranks firstRank to firstRank+len(ds)-1 of nranks, whose communicators
// initComms makes; each rank contributes its rank+1. It returns the bus
// bandwidth of each timed run, the size of one and the result check.
func (b *Backend) allReduce(ctx context.Context, ds []*device, o bench.Options, progress func(string), firstRank, nranks int,
	initComms func([]C.ncclComm_t) error) (bus []float64, size int64, check string, err error) {
	sc := b.scope()
	defer sc.closeInto(&err)
	size = 512 * mib
	if o.Quick || o.Level == bench.LevelQuick {
		size = 128 * mib
	}
	count := size / 4
	ranks := make([]rank, len(ds))
	for i, d := range ds {
		r := &ranks[i]
		r.d = d
		if err := b.use(d); err != nil {
			return nil, 0, "", err
		}
		if r.send, err = b.alloc(sc, d, size); err != nil {
			return nil, 0, "", err
		}
		if r.recv, err = b.alloc(sc, d, size); err != nil {
			return nil, 0, "", err
		}
		if err := b.cu(C.gf_cuMemsetD32(b.api, r.send, C.uint(math.Float32bits(float32(firstRank+i+1))), C.size_t(count)), "cuMemsetD32"); err != nil {
			return nil, 0, "", err
		}
		if err := b.poison(r.recv, size); err != nil {
			return nil, 0, "", err
		}
		if r.s, err = b.stream(sc, d); err != nil {
			return nil, 0, "", err
		}
		if r.t, err = b.timer(sc, d); err != nil {
			return nil, 0, "", err
		}
	}
	comms := make([]C.ncclComm_t, len(ds))
	if err := initComms(comms); err != nil {
		return nil, 0, "", err
	}
	for i, c := range comms {
		if c != nil {
			s := ranks[i].s
			sc.on(ranks[i].d, func() error {
				return errors.Join(b.cu(C.gf_cuStreamSynchronize(b.api, s), "cuStreamSynchronize"),
					b.nc(C.gf_ncclCommDestroy(b.api, c), "ncclCommDestroy"))
			})
		}
	}
	// allReduce enqueues n all-reduces back to back on every rank's
	// stream, between the ranks' timer events when timed: one collective
	// per timed run would count NCCL's launch on the host as transfer time
	// (nccl-tests times 20 in a row).
	allReduce := func(timed bool, n int) error {
		for _, r := range ranks {
			if err := b.use(r.d); err != nil {
				return err
			}
			if timed {
				if err := r.t.begin(r.s); err != nil {
					return err
				}
			}
		}
		for range n {
			if err := b.nc(C.gf_ncclGroupStart(b.api), "ncclGroupStart"); err != nil {
				return err
			}
			var errs []error
			for i, r := range ranks {
				errs = append(errs, b.nc(C.gf_ncclAllReduceSum(b.api, r.send, r.recv, C.size_t(count), comms[i], r.s), "ncclAllReduce"))
			}
			errs = append(errs, b.nc(C.gf_ncclGroupEnd(b.api), "ncclGroupEnd"))
			if err := errors.Join(errs...); err != nil {
				return err
			}
		}
		for _, r := range ranks {
			if err := b.use(r.d); err != nil {
				return err
			}
			if timed {
				if err := r.t.end(r.s); err != nil {
					return err
				}
			}
		}
		return nil
	}
	perRun := allReducesPerRun
	if o.Quick || o.Level == bench.LevelQuick {
		perRun = quickAllReducesPerRun
	}
	if err := allReduce(false, warmups); err != nil {
		return nil, 0, "", err
	}
	for _, r := range ranks {
		if err := b.use(r.d); err != nil {
			return nil, 0, "", err
		}
		if err := b.cu(C.gf_cuStreamSynchronize(b.api, r.s), "cuStreamSynchronize"); err != nil {
			return nil, 0, "", err
		}
	}
	progress(fmt.Sprintf("allreduce %s x%d (%d per run) on %d GPUs of %d ranks", humanBytes(size), o.Runs(), perRun, len(ds), nranks))
	for range o.Runs() {
		if err := ctx.Err(); err != nil {
			return nil, 0, "", err
		}
		if err := allReduce(true, perRun); err != nil {
			return nil, 0, "", err
		}
		slowest := 0.0
		for _, r := range ranks {
			if err := b.use(r.d); err != nil {
				return nil, 0, "", err
			}
			sec, err := r.t.seconds()
			if err != nil {
				return nil, 0, "", err
			}
			slowest = max(slowest, sec)
		}
		bus = append(bus, busBandwidth(float64(size), slowest/float64(perRun), nranks))
	}
	// The checked run: every rank's output poisoned, one all-reduce, a wait.
	poisonRecv := func() error {
		for _, r := range ranks {
			if err := b.use(r.d); err != nil {
				return err
			}
			if err := b.poison(r.recv, size); err != nil {
				return err
			}
		}
		return nil
	}
	if err := poisonRecv(); err != nil {
		return nil, 0, "", err
	}
	if err := allReduce(false, 1); err != nil {
		return nil, 0, "", err
	}
	for _, r := range ranks {
		if err := b.use(r.d); err != nil {
			return nil, 0, "", err
		}
		if err := b.cu(C.gf_cuStreamSynchronize(b.api, r.s), "cuStreamSynchronize"); err != nil {
			return nil, 0, "", err
		}
	}
	n, err := b.checkSums(ranks, size, nranks)
	if err != nil {
		return nil, 0, "", err
	}
	return bus, size, fmt.Sprintf("%d sampled sums equal %d on every GPU", n, nranks*(nranks+1)/2), nil
}

var _ bench.GroupBackend = (*Backend)(nil)

// groupJoinTimeout bounds how long this node's ranks wait in NCCL's
// initialization for the other nodes' ranks.
const groupJoinTimeout = 2 * time.Minute

// GroupToken opens the rendezvous of an all-reduce across nodes:
// ncclGetUniqueId, whose bootstrap root listens in this process for the
// ranks that join with it.
func (b *Backend) GroupToken(context.Context) ([]byte, error) {
	if why := b.wedged.Load(); why != nil {
		return nil, errors.New(*why)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.groupReady(); err != nil {
		return nil, err
	}
	tok := make([]byte, C.GF_NCCL_UNIQUE_ID_BYTES)
	if err := b.nc(C.gf_ncclGetUniqueId(b.api, (*C.char)(unsafe.Pointer(&tok[0]))), "ncclGetUniqueId"); err != nil {
		return nil, err
	}
	return tok, nil
}

// groupReady says why the backend cannot take part in an all-reduce
// across nodes (nil when it can); b.mu must be held.
func (b *Backend) groupReady() error {
	switch {
	case b.api == nil:
		return errors.New("cuda bench: used after close")
	case !b.nccl:
		return fmt.Errorf("all-reduce across nodes: %s", b.noNCCL)
	}
	return nil
}

// MeasureGroup runs this node's ranks of an all-reduce across nodes, as
// nccl-tests' all_reduce_perf across hosts: one communicator per GPU
// through ncclCommInitRank with rank 0's token (ranks g.Rank*GPUsPerNode
// on), then the timed all-reduces and the sum check over every rank. NCCL
// blocks until every rank joined; if the others do not within
// groupJoinTimeout (or ctx ends first), it returns an error and the
// backend refuses further work until the agent restarts, since the
// blocked call cannot be taken back.
func (b *Backend) MeasureGroup(ctx context.Context, g bench.GroupRun, o bench.Options, progress func(string)) (bench.Measurement, error) {
	if why := b.wedged.Load(); why != nil {
		return bench.Measurement{}, errors.New(*why)
	}
	if err := g.Validate("group"); err != nil {
		return bench.Measurement{}, err
	}
	if len(g.Token) != C.GF_NCCL_UNIQUE_ID_BYTES {
		return bench.Measurement{}, fmt.Errorf("group token: %d bytes, NCCL's unique id has %d", len(g.Token), C.GF_NCCL_UNIQUE_ID_BYTES)
	}
	if progress == nil {
		progress = func(string) {}
	}
	type result struct {
		m   bench.Measurement
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := b.measureGroup(ctx, g, o, progress)
		done <- result{m, err}
	}()
	timeout := time.NewTimer(groupJoinTimeout)
	defer timeout.Stop()
	select {
	case r := <-done:
		return r.m, r.err
	case <-ctx.Done():
	case <-timeout.C:
	}
	why := fmt.Sprintf("all-reduce %s: this node's ranks still wait in NCCL for the other nodes' ranks; the CUDA bench is blocked until the agent restarts", g.ID)
	b.wedged.Store(&why)
	return bench.Measurement{}, errors.New(why)
}

func (b *Backend) measureGroup(ctx context.Context, g bench.GroupRun, o bench.Options, progress func(string)) (m bench.Measurement, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.groupReady(); err != nil {
		return m, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() { err = errors.Join(err, b.cu(C.gf_cuCtxSetCurrent(b.api, nil), "cuCtxSetCurrent")) }()
	var ds []*device
	for _, d := range b.devices {
		if d.index >= 0 && o.Selects(d.index) {
			if err := b.use(d); err != nil {
				return m, fmt.Errorf("gpu %d: %w", d.index, err)
			}
			ds = append(ds, d)
		}
	}
	if len(ds) != g.GPUsPerNode {
		return m, fmt.Errorf("%d GPUs to measure, the run has %d a node", len(ds), g.GPUsPerNode)
	}
	first := g.Rank * g.GPUsPerNode
	tok := (*C.char)(unsafe.Pointer(&g.Token[0]))
	initRanks := func(comms []C.ncclComm_t) error {
		if err := b.nc(C.gf_ncclGroupStart(b.api), "ncclGroupStart"); err != nil {
			return err
		}
		var errs []error
		for i, d := range ds {
			// ncclCommInitRank takes the device current on the calling thread.
			if err := b.use(d); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, b.nc(C.gf_ncclCommInitRank(b.api, &comms[i], C.int(g.Ranks()), tok, C.int(first+i)), "ncclCommInitRank"))
		}
		errs = append(errs, b.nc(C.gf_ncclGroupEnd(b.api), "ncclGroupEnd"))
		return errors.Join(errs...)
	}
	progress(fmt.Sprintf("allreduce across %d nodes: ranks %d-%d of %d joining", len(g.Nodes), first, first+len(ds)-1, g.Ranks()))
	bus, size, check, err := b.allReduce(ctx, ds, o, progress, first, g.Ranks(), initRanks)
	if err != nil {
		return m, err
	}
	d := ds[0]
	return bench.Measurement{Name: bench.GroupName(len(g.Nodes), g.GPUsPerNode, g.Fabric), Test: bench.AllReduce,
		GPU: d.index, UUID: d.uuid, Model: d.model, GPUs: g.Ranks(), Nodes: len(g.Nodes), Group: g.ID, Members: g.Nodes, Fabric: g.Fabric,
		Size: humanBytes(size), Unit: bench.BytesPerS, Rates: bus, Check: check}, nil
}

// checkSums compares sampled elements of every rank's result with the sum
// 1 + 2 + ... + nranks; it returns how many it compared on each rank.
func (b *Backend) checkSums(ranks []rank, size int64, nranks int) (int, error) {
	want := float32(nranks * (nranks + 1) / 2)
	buf := make([]byte, min(size, 16*kib))
	n := 0
	for _, r := range ranks {
		if err := b.use(r.d); err != nil {
			return 0, err
		}
		n = 0
		for _, off := range sampleRegions(size, int64(len(buf)), 4, rand.New(rand.NewPCG(rand.Uint64(), 0))) {
			if err := b.download(buf, r.recv+C.CUdeviceptr(off)); err != nil {
				return 0, err
			}
			for i := 0; i+4 <= len(buf); i += 4 {
				got := math.Float32frombits(binary.LittleEndian.Uint32(buf[i:]))
				if got != want {
					return 0, fmt.Errorf("result check failed: gpu %d element %d is %g, want %g", r.d.index, (off+int64(i))/4, got, want)
				}
				n++
			}
		}
	}
	return n, nil
}
